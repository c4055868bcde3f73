module gemmgen

go 1.26.0
