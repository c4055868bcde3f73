//go:build !race

package model

const raceBuild = false
