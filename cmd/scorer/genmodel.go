package main

import "errors"

func runGenModel(args []string) error { return errors.New("not implemented yet") }
