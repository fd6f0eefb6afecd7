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
	res, err := kasbuild.Build(ctx, kasbuild.Options{
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kas-build:", err)
		os.Exit(1)
	}
	fmt.Println(res.Binary)
}
