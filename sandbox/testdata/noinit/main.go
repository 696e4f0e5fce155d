// Command noinit starts a sandbox without calling sandbox.Init, to show
// that forgetting the call neither hangs nor loops.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tent-sandbox/tent/sandbox"
)

func main() {
	out, err := sandbox.Command(context.Background(), sandbox.Spec{}, "echo", "sandboxed").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "noinit:", err)
		os.Exit(1)
	}
	fmt.Print(string(out))
}
