package protocoltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBoardCommandRunsOnlyThatTest: the --exec line splits, as a shell splits it, into the
// binary and a -test.run pattern that selects exactly the test (a subtest too), whatever
// characters the names hold; plain names stay unquoted.
func TestBoardCommandRunsOnlyThatTest(t *testing.T) {
	if got := boardCommand("/tmp/b001/x.test", "TestA"); got != "/tmp/b001/x.test -test.run=^TestA$" {
		t.Fatalf("a plain command: %s", got)
	}
	binary := "/tmp/go build/it's.test"
	line := boardCommand(binary, "TestA/case_[1]")
	out, err := exec.Command("/bin/sh", "-c", `printf '%s\n' `+line).Output()
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(words) != 2 || words[0] != binary || !strings.HasPrefix(words[1], "-test.run=") {
		t.Fatalf("%s splits into %q", line, words)
	}
	parts := strings.Split(strings.TrimPrefix(words[1], "-test.run="), "/")
	for i, name := range []string{"TestA", "case_[1]"} {
		pattern := regexp.MustCompile(parts[i])
		if !pattern.MatchString(name) || pattern.MatchString(name+"x") || pattern.MatchString("x"+name) {
			t.Fatalf("%s does not select exactly %s", parts[i], name)
		}
	}
}

// TestTraceDirDefaultsToTestdata: traces go to Options.TraceDir, else $TASKBOARD_TRACE_DIR,
// else testdata/taskboard-traces of the package, made if missing and absolute.
func TestTraceDirDefaultsToTestdata(t *testing.T) {
	here, _ := os.Getwd()
	mine := t.TempDir()
	t.Setenv(EnvTraceDir, "")
	cases := []struct {
		opts Options
		env  string
		want string
	}{
		{Options{TraceDir: filepath.Join(mine, "a")}, filepath.Join(mine, "b"), filepath.Join(mine, "a")},
		{Options{}, filepath.Join(mine, "b"), filepath.Join(mine, "b")},
		{Options{}, "", filepath.Join(here, "testdata", "taskboard-traces")},
	}
	for _, c := range cases {
		t.Setenv(EnvTraceDir, c.env)
		got, err := traceDir(c.opts)
		if err != nil || got != c.want {
			t.Fatalf("traceDir(%+v) with $%s=%q = %q, %v; want %q", c.opts, EnvTraceDir, c.env, got, err, c.want)
		}
		if info, err := os.Stat(got); err != nil || !info.IsDir() {
			t.Fatalf("%s was not made: %v", got, err)
		}
	}
}

// TestFuzzArgsCarryTheOptions: each option becomes its `taskboard fuzz` flag, and
// $TASKBOARD_FUZZ_ARGS comes last, so it wins.
func TestFuzzArgsCarryTheOptions(t *testing.T) {
	t.Setenv(EnvArgs, "--budget 10m")
	got := fuzzArgs("BOARD", "/traces", 90*time.Second, Options{
		Seed: 7, Clock: "wall", Mode: "sequential", Database: "/db", Args: []string{"--workers", "2"},
	})
	want := []string{
		"fuzz", "--exec", "BOARD", "--quiet", "--trace-dir", "/traces", "--max-examples", "100",
		"--budget", "90s", "--seed", "7", "--clock", "wall", "--mode", "sequential",
		"--database", "/db", "--workers", "2", "--budget", "10m",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fuzzArgs =\n%q\nwant\n%q", got, want)
	}
}

// TestKeptTracesNamesOnlyTheRunsTraces: the failure message names the traces this run
// wrote, not older ones, with a replay command.
func TestKeptTracesNamesOnlyTheRunsTraces(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "trace-old.json")
	if err := os.WriteFile(old, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := traceFiles(dir)
	if got := keptTraces(dir, before, "TestX"); !strings.HasPrefix(got, "no trace was written") {
		t.Fatalf("keptTraces with no new trace: %q", got)
	}
	fresh := filepath.Join(dir, "trace-new.json")
	if err := os.WriteFile(fresh, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := keptTraces(dir, before, "TestX")
	if !strings.Contains(got, fresh) || strings.Contains(got, old) || !strings.Contains(got, "taskboard replay") {
		t.Fatalf("keptTraces = %q", got)
	}
}
