package main

import (
	"os"
	"time"
)

func main() {
	a := &app{now: time.Now}
	os.Exit(a.execute(os.Args[1:], os.Stdout, os.Stderr))
}
