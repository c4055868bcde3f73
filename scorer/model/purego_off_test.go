//go:build !purego

package model

const puregoBuild = false
