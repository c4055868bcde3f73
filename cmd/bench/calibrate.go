package main

import "errors"

func runCalibrate(args []string) error { return errors.New("not implemented yet") }
