import json, random, sys
random.seed(int(sys.argv[1])); n=int(sys.argv[2])
pools = [
 list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
 list("0123456789"), list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
 [" "," "," ","  ","\t","\n","\r\n","\r","\n\n"," \n","\u00a0","\u2009","\u3000","\u2028","\u0085","\u000b","\u000c","\u200b","\u180e","\u202f","\u205f","\u1680"],
 list("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质"),
 list("ぁあいうえおかがきぎくぐけげこごアイウエオカキクケコ한국어안녕하세요"),
 list("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕ"), list("αβγδεζηθικλμνξοπρστυφχψω"),
 list("éèêëàâäôöûüçñßøåæœÉÀÇ"), ["e\u0301","a\u0308","o\u0302","\u0301","\u0308","n\u0303","\u1100\u1161","A\u030a"],
 list("กขคงจฉชซญดตถทนบปผพฟภมยรลวศษสหฬอฮะาิีึืุูเแโใไ่้๊๋"), list("अआइईउऊएऐओऔकखगघङचछजझ्ािीुूेैोौं"),
 list("ابتثجحخدذرزسشصضطظعغفقكلمنهوي"), ["😀","😁","🚀","🦙","👍🏽","👨‍👩‍👧","❤️","✅","🇨🇳","™","©","®","°","±","×","÷","€","£","¥","½","²","³","Ⅷ","①","٣","۵","߅","〇"],
 ["'s","'S","'t","'T","'re","'RE","'Re","'ve","'VE","'m","'M","'ll","'LL","'lL","'d","'D","'ſ","'x","'","''"],
 ["<|im_start|>","<|im_end|>","<think>","</think>","<|endoftext|>","<tool_call>","<|im_start|","<|im_","<|fim_prefix|>","<","|>"],
 list("，。、！？；：（）【】《》「」…—～"), ["\ufffd","\ufeff","\u200d","\u200c","\u00ad","\u2060"],
 ["Hello","world","iPhone","USB-C","don't","I'M","you're","we'VE","3.14","1,000","2024-01-01","https://example.com/a?b=c","foo_bar","CamelCase","x86_64","@user","#tag"],
]
def rand_text():
    k = random.choice([1,2,3,5,8,13,20,40,80])
    ps = random.sample(range(len(pools)), random.randint(1,5))
    out=[]
    for _ in range(k):
        p = pools[random.choice(ps)]
        out.append(random.choice(p))
        if random.random()<0.3: out.append(random.choice([" ","  ","\n",""]))
    return "".join(out)
for _ in range(n):
    print(json.dumps(rand_text(), ensure_ascii=random.random()<0.5))
