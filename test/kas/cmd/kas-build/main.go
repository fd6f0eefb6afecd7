package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasbuild"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	opts := kasbuild.Options{
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	}
	build := kasbuild.Build
	switch {
	case len(os.Args) == 1 || os.Args[1] == "kas":
	case os.Args[1] == "kcm" && len(os.Args) == 2:
		build = kasbuild.BuildKCM
	case os.Args[1] == "kubectl" && len(os.Args) == 2:
		build = kasbuild.BuildKubectl
	default:
		fmt.Fprintln(os.Stderr, "usage: kas-build [kas|kcm|kubectl]")
		os.Exit(2)
	}
	res, err := build(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kas-build:", err)
		os.Exit(1)
	}
	fmt.Println(res.Binary)
}
