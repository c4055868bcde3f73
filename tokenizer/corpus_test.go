package tokenizer

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// Deterministic mixed Chinese/English product text for benchmarks and the estimator's
// calibration: titles, attributes and descriptions as an e-commerce catalogue has them.
var (
	corpusBrands  = []string{"Apple", "Xiaomi", "HUAWEI", "Sony", "Lenovo", "Anker", "Nike", "Uniqlo", "Philips", "DJI", "Logitech", "Samsung", "美的", "格力", "小米", "华为", "李宁", "安踏"}
	corpusEnglish = []string{"wireless", "bluetooth", "headphones", "noise", "cancelling", "portable", "charger", "fast", "charging", "stainless", "steel", "water", "bottle", "insulated", "running", "shoes", "men's", "women's", "breathable", "lightweight", "laptop", "backpack", "waterproof", "ergonomic", "mechanical", "keyboard", "gaming", "mouse", "smart", "watch", "fitness", "tracker", "heart", "rate", "monitor", "USB-C", "cable", "high-speed", "4K", "HDR", "display", "battery", "life", "premium", "quality", "durable", "compatible", "with", "for", "and", "the", "a", "of", "in", "original", "official", "genuine", "new", "edition", "Pro", "Max", "Ultra", "Mini", "Plus", "kitchen", "cookware", "non-stick", "frying", "pan", "induction", "air", "fryer", "vacuum", "cleaner", "robot", "camera", "stabilizer", "drone", "photography", "professional", "accessories", "replacement", "warranty", "year", "free", "shipping"}
	corpusChinese = []string{"无线", "蓝牙", "耳机", "降噪", "便携", "充电器", "快充", "不锈钢", "保温杯", "跑步鞋", "男款", "女款", "透气", "轻便", "笔记本电脑", "双肩包", "防水", "人体工学", "机械键盘", "游戏", "鼠标", "智能手表", "运动", "心率", "监测", "数据线", "高速", "显示屏", "电池", "续航", "高品质", "耐用", "兼容", "官方", "正品", "新款", "旗舰店", "厨房", "不粘锅", "煎锅", "电磁炉", "空气炸锅", "吸尘器", "扫地机器人", "相机", "稳定器", "无人机", "摄影", "专业", "配件", "替换", "保修", "包邮", "限时", "优惠", "热销", "爆款", "适用于", "家用", "大容量", "超长待机", "支持", "的", "和", "是", "款", "颜色", "尺寸", "重量", "材质", "产地", "中国"}
	corpusUnits   = []string{"mm", "cm", "g", "kg", "mAh", "W", "GB", "TB", "ml", "L", "inch", "英寸", "毫升", "克", "件", "个", "小时"}
	corpusAttrs   = []string{"颜色", "Color", "尺寸", "Size", "重量", "Weight", "材质", "Material", "型号", "Model", "容量", "Capacity"}
	corpusPunct   = []string{", ", ". ", "，", "。", "、", "！", "；", " - ", " / ", "：", "（", "）", "【", "】", " | ", "!", "?", "..."}
)

// productText returns n bytes (cut at a character boundary, so ≤ n) of product text from seed.
func productText(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	var b strings.Builder
	b.Grow(n + 64)
	pick := func(list []string) string { return list[r.IntN(len(list))] }
	for b.Len() < n {
		switch k := r.IntN(20); {
		case k < 6:
			b.WriteString(pick(corpusEnglish))
			b.WriteByte(' ')
		case k < 12:
			b.WriteString(pick(corpusChinese))
		case k < 13:
			b.WriteString(pick(corpusBrands))
			b.WriteByte(' ')
		case k < 15:
			b.WriteString(strconv.Itoa(r.IntN(5000)))
			b.WriteString(pick(corpusUnits))
			b.WriteByte(' ')
		case k < 16:
			b.WriteString(pick(corpusAttrs))
			b.WriteString(": ")
		case k < 19:
			b.WriteString(pick(corpusPunct))
		default:
			if r.IntN(3) == 0 {
				b.WriteString("\n")
			} else {
				b.WriteString(" ")
			}
		}
	}
	// Cutting may split a character at the end; dropping the partial bytes keeps it valid.
	return strings.ToValidUTF8(b.String()[:n], "")
}
