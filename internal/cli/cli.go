// Package cli dispatches a binary's subcommands and prints their help. It keeps the mains thin.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Command is one subcommand. Run gets the arguments after the subcommand's name; it returns
// flag.ErrHelp after printing its own help for -h/--help.
type Command struct {
	Name    string
	Summary string
	Run     func(args []string) error
}

// Dispatch runs the subcommand named by args[0] and returns the process exit code.
func Dispatch(prog, summary string, args []string, cmds []Command) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "%s: %s\n\nUsage:\n  %s <command> [flags]\n\nCommands:\n", prog, summary, prog)
		for _, c := range cmds {
			fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
		}
		fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags.\n", prog)
	}
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(os.Stdout)
		return 0
	}
	for _, c := range cmds {
		if c.Name == args[0] {
			err := c.Run(args[1:])
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			default:
				fmt.Fprintf(os.Stderr, "%s %s: %v\n", prog, c.Name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(os.Stderr, "%s: unknown command %q\n\n", prog, args[0])
	usage(os.Stderr)
	return 2
}

// NewFlagSet returns a flag set for a subcommand whose usage prints a one-line description and
// the flags. Parse errors are returned, not fatal.
func NewFlagSet(prog, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s %s %s\n\nFlags:\n", prog, name, usage)
		fs.PrintDefaults()
	}
	return fs
}
