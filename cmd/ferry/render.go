package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

// renderFlags bound the child that loads and renders charts
// (chartrender.Limited): --render-memory and --render-timeout.
type renderFlags struct {
	memory  string
	timeout time.Duration
}

func (f *renderFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.memory, "render-memory", "512MiB", "memory a chart may take to load and render (a chart past it is refused)")
	cmd.Flags().DurationVar(&f.timeout, "render-timeout", chartrender.DefaultTimeout, "time a chart may take to load, or to render (a chart past it is refused)")
}

// limits are the limits the flags set.
func (f *renderFlags) limits() (chartrender.Limits, error) {
	mem, err := cli.ParseSize(f.memory)
	if err != nil {
		return chartrender.Limits{}, fmt.Errorf("--render-memory: %w", err)
	}
	if mem < minRenderMemory {
		return chartrender.Limits{}, fmt.Errorf("--render-memory %s: at least 128MiB (ferry itself takes about 80 MiB)", f.memory)
	}
	if f.timeout <= 0 {
		return chartrender.Limits{}, fmt.Errorf("--render-timeout %s: want a positive duration, e.g. 30s", f.timeout)
	}
	return chartrender.Limits{Memory: mem, Timeout: f.timeout}, nil
}

// minRenderMemory is the least --render-memory taken: the child is ferry
// itself, which needs some 80 MiB before it reads a chart.
const minRenderMemory = 128 << 20

// renderer is the bounded renderer the flags set; the caller closes it.
func (f *renderFlags) renderer() (*chartrender.Limited, error) {
	lim, err := f.limits()
	if err != nil {
		return nil, err
	}
	return &chartrender.Limited{Limits: lim}, nil
}

// renderAdvice says which flag raises the limit a chart was refused at.
func renderAdvice(err error) error {
	var le *chartrender.LimitError
	if !errors.As(err, &le) {
		return err
	}
	switch le.Resource {
	case "memory":
		return fmt.Errorf("%w (--render-memory raises it)", err)
	case "time":
		return fmt.Errorf("%w (--render-timeout raises it)", err)
	}
	return err
}
