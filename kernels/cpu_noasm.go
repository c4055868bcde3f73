//go:build !amd64 || purego

package kernels

// Without assembly only the generic reference exists.
func activeISA() isaLevel { return isaGeneric }

func setISA(isaLevel) isaLevel { return isaGeneric }
