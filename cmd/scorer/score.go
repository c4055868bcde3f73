package main

import "errors"

func runScore(args []string) error { return errors.New("not implemented yet") }
