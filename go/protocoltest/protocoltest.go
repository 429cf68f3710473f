// Package protocoltest checks a Go board from go test: Fuzz runs the Python checker,
// `taskboard fuzz --exec`, on the test binary itself, which serves the board over the board
// protocol (SPEC 10) when the checker starts it. A host's whole test is
//
//	func TestContract(t *testing.T) {
//		protocoltest.Fuzz(t, protocol.Host{Name: "myboard", New: newBoard}, protocoltest.Options{})
//	}
//
// A contract violation fails the test with the checker's report; its trace stays in
// testdata/taskboard-traces of the package (or Options.TraceDir, or $TASKBOARD_TRACE_DIR),
// where the next run can be compared with it and `taskboard replay` can replay it.
//
// The checker is `taskboard` on the PATH (pip install taskboard-contract), or the command
// line in $TASKBOARD_COMMAND (split on spaces), say "python3 -m taskboard".
package protocoltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskboard-contract/taskboard/go/protocol"
)

// Environment variables the helper reads.
const (
	// EnvServe is set, to the test's name, in the processes the checker starts: there Fuzz
	// serves the board on stdin and stdout instead of running the checker.
	EnvServe = "TASKBOARD_GO_SERVE"
	// EnvCommand overrides the checker's command line (split on spaces).
	EnvCommand = "TASKBOARD_COMMAND"
	// EnvArgs holds more `taskboard fuzz` options, split on spaces and given after
	// Options's, so they win: TASKBOARD_FUZZ_ARGS="--budget 10m" go test ./... runs longer.
	EnvArgs = "TASKBOARD_FUZZ_ARGS"
	// EnvTraceDir is where traces go when Options.TraceDir is empty (as for `taskboard fuzz`).
	EnvTraceDir = "TASKBOARD_TRACE_DIR"
)

// DefaultTraceDir is where traces go when neither Options.TraceDir nor $TASKBOARD_TRACE_DIR
// says: relative to the package directory, where go test runs the test.
var DefaultTraceDir = filepath.Join("testdata", "taskboard-traces")

// Options are the run's `taskboard fuzz` options; the zero value is a sensible run.
type Options struct {
	// MaxExamples stops the run after this many examples (default 100).
	MaxExamples int
	// Budget stops the run after this long (default 60s, and never past the test's
	// deadline). Shrinking a failure found may take up to a minute more.
	Budget time.Duration
	// Seed makes the run repeatable; 0 draws a fresh seed each run.
	Seed int64
	// Clock is "manual" (the default: the board reads time from the protocol.Clock it is
	// given), "wall" (the board keeps its own time, a server's clock) or "virtual".
	Clock string
	// Mode is "mixed" (the default), "sequential" or "parallel".
	Mode string
	// TraceDir is where failing traces go (default $TASKBOARD_TRACE_DIR, else
	// DefaultTraceDir); it is made if missing and never removed.
	TraceDir string
	// Database is the example database (default: the checker's, .hypothesis/examples in
	// the package directory), so the next run replays a failure first.
	Database string
	// Args are more `taskboard fuzz` options, as on its command line.
	Args []string
}

// Fuzz runs `taskboard fuzz --exec` on this test binary serving host, and fails t with the
// checker's report when it finds a contract violation (exit 1), an infrastructure fault
// (exit 3) or a usage error (exit 2); it logs the report when the board passes. In the
// processes the checker starts, Fuzz serves host and exits the process instead.
//
// Each board process runs the test again up to Fuzz: what the test does before it (and
// TestMain) runs once per process, so set up shared storage in host.New, or once in the
// go test process and hand it over in an environment variable, which the board processes
// inherit. None of it may write to stdout (that breaks the protocol); what the board
// prints while it serves goes to stderr.
func Fuzz(t *testing.T, host protocol.Host, opts Options) {
	t.Helper()
	if serving := os.Getenv(EnvServe); serving != "" {
		if serving != t.Name() {
			t.Skipf("this process serves %s for the checker", serving)
		}
		serve(host)
	}
	checker, err := checkerCommand()
	if err != nil {
		t.Fatal(err)
	}
	traces, err := traceDir(opts)
	if err != nil {
		t.Fatalf("protocoltest: the trace directory: %v", err)
	}
	before := traceFiles(traces)
	budget := opts.Budget
	if budget <= 0 {
		budget = 60 * time.Second
	}
	ctx := context.Background()
	if deadline, ok := t.Deadline(); ok {
		// Leave room for shrinking and for go test to report.
		if left := time.Until(deadline) / 2; left < budget {
			budget = left
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-5*time.Second))
		defer cancel()
	}
	board := boardCommand(os.Args[0], t.Name())
	args := append(checker[1:], fuzzArgs(board, traces, budget, opts)...)
	cmd := exec.CommandContext(ctx, checker[0], args...)
	cmd.Env = append(os.Environ(), EnvServe+"="+t.Name())
	output, err := cmd.CombinedOutput()
	report := strings.TrimSpace(string(output))
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Logf("taskboard fuzz: the board keeps the contract\n%s", report)
		return
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		t.Fatalf("taskboard fuzz found a contract violation\n\n%s\n\n%s", report, keptTraces(traces, before, t.Name()))
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		t.Fatalf("taskboard fuzz stopped on an infrastructure fault (the board's own trouble, not a verdict)\n\n%s", report)
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		t.Fatalf("taskboard fuzz could not start the board: %s\n\n%s", strings.Join(cmd.Args, " "), report)
	default:
		t.Fatalf("taskboard fuzz: %v\n\n%s", err, report)
	}
}

// serve answers the checker on stdin and stdout, and exits the process.
func serve(host protocol.Host) {
	out := os.Stdout
	os.Stdout = os.Stderr // a stray print must not break the protocol
	if err := protocol.Serve(host, os.Stdin, out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// checkerCommand is the checker's command line: $TASKBOARD_COMMAND, else taskboard.
func checkerCommand() ([]string, error) {
	if line := strings.Fields(os.Getenv(EnvCommand)); len(line) > 0 {
		return line, nil
	}
	path, err := exec.LookPath("taskboard")
	if err != nil {
		return nil, fmt.Errorf("protocoltest: the checker, taskboard, is not on the PATH: install it (pip install taskboard-contract) or set %s, say to \"python3 -m taskboard\"", EnvCommand)
	}
	return []string{path}, nil
}

// traceDir is the run's trace directory, absolute, made if missing.
func traceDir(opts Options) (string, error) {
	dir := opts.TraceDir
	if dir == "" {
		dir = os.Getenv(EnvTraceDir)
	}
	if dir == "" {
		dir = DefaultTraceDir
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// boardCommand is the --exec command line that runs this test binary as the board of the
// test named test: only that test, which then serves (shell-quoted, as --exec splits it).
func boardCommand(binary, test string) string {
	return shellQuote(binary) + " " + shellQuote("-test.run="+runPattern(test))
}

// runPattern is the -test.run pattern that selects exactly the test (or subtest) named test.
func runPattern(test string) string {
	parts := strings.Split(test, "/")
	for i, part := range parts {
		parts[i] = "^" + regexp.QuoteMeta(part) + "$"
	}
	return strings.Join(parts, "/")
}

// shellQuote quotes word for a POSIX shell (and Python's shlex), bare when it can be.
func shellQuote(word string) string {
	if word != "" && strings.Trim(word, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=^$,:+") == "" {
		return word
	}
	return "'" + strings.ReplaceAll(word, "'", `'"'"'`) + "'"
}

// fuzzArgs are the `taskboard fuzz` arguments of a run.
func fuzzArgs(board, traces string, budget time.Duration, opts Options) []string {
	examples := opts.MaxExamples
	if examples <= 0 {
		examples = 100
	}
	args := []string{
		"fuzz", "--exec", board, "--quiet", "--trace-dir", traces,
		"--max-examples", strconv.Itoa(examples),
		"--budget", fmt.Sprintf("%ds", seconds(budget)),
	}
	if opts.Seed != 0 {
		args = append(args, "--seed", strconv.FormatInt(opts.Seed, 10))
	}
	if opts.Clock != "" {
		args = append(args, "--clock", opts.Clock)
	}
	if opts.Mode != "" {
		args = append(args, "--mode", opts.Mode)
	}
	if opts.Database != "" {
		args = append(args, "--database", opts.Database)
	}
	args = append(args, opts.Args...)
	return append(args, strings.Fields(os.Getenv(EnvArgs))...)
}

// seconds is d in whole seconds, at least 1.
func seconds(d time.Duration) int {
	if s := int(d.Round(time.Second) / time.Second); s > 1 {
		return s
	}
	return 1
}

// traceFiles maps each trace in dir to its modification time.
func traceFiles(dir string) map[string]time.Time {
	files := map[string]time.Time{}
	found, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, path := range found {
		if info, err := os.Stat(path); err == nil {
			files[path] = info.ModTime()
		}
	}
	return files
}

// keptTraces says which traces the run wrote and how to replay one.
func keptTraces(dir string, before map[string]time.Time, test string) string {
	var written []string
	for path, modified := range traceFiles(dir) {
		if old, ok := before[path]; !ok || modified.After(old) {
			written = append(written, path)
		}
	}
	sort.Strings(written)
	if written == nil {
		return "no trace was written in " + dir
	}
	return fmt.Sprintf("the trace is kept in %s\nreplay it with the test binary as the board:\n"+
		"  go test -c -o board.test && %s=%s taskboard replay %s --exec %s",
		strings.Join(written, ", "), EnvServe, shellQuote(test), shellQuote(written[0]),
		shellQuote(boardCommand("./board.test", test)))
}
