package main

import "errors"

func runLoad(args []string) error { return errors.New("not implemented yet") }
