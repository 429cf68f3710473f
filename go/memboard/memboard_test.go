package memboard_test

import (
	"os"
	"testing"

	taskboard "github.com/taskboard-contract/taskboard/go"
	"github.com/taskboard-contract/taskboard/go/memboard"
	"github.com/taskboard-contract/taskboard/go/protocol"
	"github.com/taskboard-contract/taskboard/go/protocoltest"
)

// TestMemboardKeepsTheContract runs the checker on the board, served by this test binary.
// MEMBOARD_BUG=release-ignores-token plants a bug, so the test fails with the report and a
// trace kept in testdata/taskboard-traces (tests/test_go_boards.py watches it do so).
func TestMemboardKeepsTheContract(t *testing.T) {
	bug := os.Getenv("MEMBOARD_BUG")
	host := protocol.Host{
		Name: "memboard",
		New: func(tasks []taskboard.Task, clock protocol.Clock) (taskboard.Board, string, error) {
			board := memboard.New(tasks, clock)
			board.Bug = bug
			return board, "", nil
		},
	}
	protocoltest.Fuzz(t, host, protocoltest.Options{Seed: 1, MaxExamples: 20})
}
