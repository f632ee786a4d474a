package main

import (
	"context"
	"fmt"
	"io"
)

func runScheduled(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	return nil, fmt.Errorf("scheduled: not implemented yet")
}
