package protocol_test

import (
	"errors"
	"strings"
	"testing"

	taskboard "github.com/taskboard-contract/taskboard/go"
	"github.com/taskboard-contract/taskboard/go/memboard"
	"github.com/taskboard-contract/taskboard/go/protocol"
)

var host = protocol.Host{
	Name:   "memboard",
	NoFail: true,
	New: func(tasks []taskboard.Task, clock protocol.Clock) (taskboard.Board, string, error) {
		return memboard.New(tasks, clock), "in-memory", nil
	},
}

func serve(t *testing.T, requests ...string) []string {
	t.Helper()
	var out strings.Builder
	if err := protocol.Serve(host, strings.NewReader(strings.Join(requests, "\n")+"\n"), &out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// TestServeAnswersEachOpWithItsTypedResult: each op's answer carries exactly its result's
// fields, as SPEC 10 spells them.
func TestServeAnswersEachOpWithItsTypedResult(t *testing.T) {
	got := serve(t,
		`{"id":1,"op":"hello","protocol":1}`,
		`{"id":2,"op":"init","tasks":[{"id":"t1","title":"build","deps":[],"state":"open","owner":"","lease":null,"seq":0}],"clock":"manual","now":1767225600000000}`,
		`{"id":3,"op":"claim","task":"t1","agent":"a1","ttl":0}`,
		`{"id":4,"op":"claim","task":"t1","agent":"a2","ttl":5000}`,
		`{"id":5,"op":"release","task":"t1","token":"nope"}`,
		`{"id":6,"op":"fail","task":"t1","token":"nope"}`,
		`{"id":7,"op":"set_time","now":1767225600005000}`,
		`{"id":8,"op":"close"}`,
		`{"id":9,"op":"list"}`,
	)
	want := []string{
		`{"id":1,"ok":true,"protocol":1,"name":"memboard","ops":["renew"],"durable":false}`,
		`{"id":2,"ok":true,"storage":"in-memory"}`,
		`{"id":3,"ok":true,"task":{"id":"t1","title":"build","deps":[],"state":"claimed","owner":"a1","lease":{"token":"TOKEN","fence":1,"until":null},"seq":1}}`,
		`{"id":4,"ok":false,"error":"taken","message":"taskboard: task is held by a live lease"}`,
		`{"id":5,"ok":false,"error":"lease_lost","message":"taskboard: the token no longer holds the task"}`,
		`{"id":6,"ok":false,"error":"unsupported","message":"unsupported"}`,
		`{"id":7,"ok":true}`,
		`{"id":8,"ok":true}`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d (nothing after close): %q", len(got), len(want), got)
	}
	for i := range want {
		line := got[i]
		if at := strings.Index(line, `"token":"`); at >= 0 {
			end := strings.Index(line[at+9:], `"`)
			line = line[:at+9] + "TOKEN" + line[at+9+end:]
		}
		if line != want[i] {
			t.Errorf("answer %d:\n got %s\nwant %s", i+1, line, want[i])
		}
	}
}

// TestServeListAnswersAnEmptyListAndRequestsBeforeInitFail: list on an empty board is
// "tasks":[], and a board op before init is the board's own trouble (internal).
func TestServeListAnswersAnEmptyListAndRequestsBeforeInitFail(t *testing.T) {
	got := serve(t, `{"id":1,"op":"list"}`, `{"id":2,"op":"init","tasks":[],"clock":"wall","now":0}`, `{"id":3,"op":"list"}`)
	want := []string{
		`{"id":1,"ok":false,"error":"internal","message":"list before init"}`,
		`{"id":2,"ok":true,"storage":"in-memory"}`,
		`{"id":3,"ok":true,"tasks":[]}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

type closedPipe struct{}

var errClosed = errors.New("broken pipe")

func (closedPipe) Write([]byte) (int, error) { return 0, errClosed }

// TestServeReturnsTheWriteError: an answer that cannot be written (the checker closed the
// pipe) ends Serve with that error, naming the op.
func TestServeReturnsTheWriteError(t *testing.T) {
	err := protocol.Serve(host, strings.NewReader(`{"id":1,"op":"hello","protocol":1}`+"\n"), closedPipe{})
	if !errors.Is(err, errClosed) || !strings.Contains(err.Error(), "hello") {
		t.Fatalf("Serve = %v; want the write error, naming hello", err)
	}
}

// TestServeRejectsALineThatIsNotJSON: a line that is not JSON ends Serve with an error.
func TestServeRejectsALineThatIsNotJSON(t *testing.T) {
	var out strings.Builder
	err := protocol.Serve(host, strings.NewReader("{oops\n"), &out)
	if err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("Serve = %v; want a not-JSON error", err)
	}
}
