package main

import "errors"

func runCluster(args []string) error { return errors.New("not implemented yet") }
