package main

import "errors"

func runCompare(args []string) error { return errors.New("not implemented yet") }
