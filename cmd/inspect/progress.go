package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// addProgressFlag adds --progress to a long command (export, compact,
// check); auto says when auto draws the bar.
func addProgressFlag(cmd *cobra.Command, mode *string, auto string) {
	cmd.Flags().StringVar(mode, "progress", "auto", "progress bar on stderr: auto ("+auto+"), always, never")
}

func checkProgressFlag(mode string) error {
	switch mode {
	case "auto", "always", "never":
		return nil
	}
	return fmt.Errorf("--progress %q: want auto, always or never", mode)
}

// progress is a progress bar on stderr (github.com/schollz/progressbar),
// drawn when stderr is a terminal and the command's output is not
// (--progress auto), always or never; a bar not drawn does nothing. Its
// methods are called from the command's goroutine only.
type progress struct {
	bar *progressbar.ProgressBar // nil: not drawn
	w   io.Writer
}

// newProgress returns a bar on w of total units described as what (none
// for total 0: nothing to show). out is where the command writes while
// the bar runs (export's stdout), or nil: when it is a terminal too, auto
// draws no bar, which would be drawn amid the output on the same screen
// (as curl shows no progress meter when it writes to the terminal).
func newProgress(w, out io.Writer, mode string, total int64, what string) *progress {
	on := mode == "always"
	if mode == "auto" {
		on = isTerminal(w) && (out == nil || !isTerminal(out))
	}
	if !on || total <= 0 {
		return &progress{}
	}
	p := &progress{w: w}
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetTheme(progressbar.ThemeASCII),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(false),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionSetSpinnerChangeInterval(0), // no goroutine of its own
	)
	return p
}

// add counts n more units done.
func (p *progress) add(n int) {
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

// describe changes what the bar says it does.
func (p *progress) describe(what string) {
	if p.bar != nil {
		p.bar.Describe(what)
	}
}

// done draws the bar as it ends and ends its line. A bar that did not
// reach its total (an error) is left where it stopped.
func (p *progress) done() {
	if p.bar == nil {
		return
	}
	if st := p.bar.State(); st.CurrentNum >= st.Max {
		_ = p.bar.Finish()
	} else {
		_ = p.bar.RenderBlank()
		_ = p.bar.Exit()
	}
	fmt.Fprintln(p.w)
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
