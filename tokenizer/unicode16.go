package tokenizer

import "unicode"

// Hugging Face's pre-tokenizer regex runs on Oniguruma with Unicode 16.0 property tables; Go's
// unicode package is Unicode 15.0. These are the characters that Unicode 15.1 and 16.0 assigned
// to \p{L} and \p{N}, which runeClass would otherwise call "other" (Garay, Gurung Khema, Kirat Rai,
// Ol Onal, Sunuwar, Todhri, Tulu-Tigalari, Egyptian Hieroglyphs Extended-A, CJK Extension I, ...).
// Found by comparing every code point's class as HF's pre-tokenizer shows it (" X's" splits
// differently for a letter, a number and anything else) with runeClass, tokenizers 0.23.2: no
// other difference. Characters new in Unicode 17.0 are "other" on both sides.
var (
	unicode16Letter = &unicode.RangeTable{
		R16: []unicode.Range16{
			{Lo: 0x1c89, Hi: 0x1c8a, Stride: 1},
			{Lo: 0xa7cb, Hi: 0xa7cd, Stride: 1},
			{Lo: 0xa7da, Hi: 0xa7dc, Stride: 1},
		},
		R32: []unicode.Range32{
			{Lo: 0x105c0, Hi: 0x105f3, Stride: 1},
			{Lo: 0x10d4a, Hi: 0x10d65, Stride: 1},
			{Lo: 0x10d6f, Hi: 0x10d85, Stride: 1},
			{Lo: 0x10ec2, Hi: 0x10ec4, Stride: 1},
			{Lo: 0x11380, Hi: 0x11389, Stride: 1},
			{Lo: 0x1138b, Hi: 0x1138e, Stride: 3},
			{Lo: 0x11390, Hi: 0x113b5, Stride: 1},
			{Lo: 0x113b7, Hi: 0x113b7, Stride: 1},
			{Lo: 0x113d1, Hi: 0x113d3, Stride: 2},
			{Lo: 0x11bc0, Hi: 0x11be0, Stride: 1},
			{Lo: 0x13460, Hi: 0x143fa, Stride: 1},
			{Lo: 0x16100, Hi: 0x1611d, Stride: 1},
			{Lo: 0x16d40, Hi: 0x16d6c, Stride: 1},
			{Lo: 0x18cff, Hi: 0x18cff, Stride: 1},
			{Lo: 0x1e5d0, Hi: 0x1e5ed, Stride: 1},
			{Lo: 0x1e5f0, Hi: 0x1e5f0, Stride: 1},
			{Lo: 0x2ebf0, Hi: 0x2ee5d, Stride: 1},
		},
	}
	unicode16Number = &unicode.RangeTable{
		R32: []unicode.Range32{
			{Lo: 0x10d40, Hi: 0x10d49, Stride: 1},
			{Lo: 0x116d0, Hi: 0x116e3, Stride: 1},
			{Lo: 0x11bf0, Hi: 0x11bf9, Stride: 1},
			{Lo: 0x16130, Hi: 0x16139, Stride: 1},
			{Lo: 0x16d70, Hi: 0x16d79, Stride: 1},
			{Lo: 0x1ccf0, Hi: 0x1ccf9, Stride: 1},
			{Lo: 0x1e5f1, Hi: 0x1e5fa, Stride: 1},
		},
	}
)
