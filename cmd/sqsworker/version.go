package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() {
	commands = append(commands, func(a *app) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print the version of sqsworker",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				v := "(devel)"
				if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
					v = bi.Main.Version
				}
				_, err := fmt.Fprintln(a.out, "sqsworker", v)
				return err
			},
		}
	})
}
