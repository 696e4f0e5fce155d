//go:build !linux

package oci

import (
	"context"
	"errors"
	"fmt"
)

func run(ctx context.Context, g *globals, cmd string, args []string) (int, error) {
	return 1, fmt.Errorf("%s: %w", cmd, errors.ErrUnsupported)
}
