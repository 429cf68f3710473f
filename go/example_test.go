package taskboard_test

import (
	"context"
	"fmt"
	"time"

	taskboard "github.com/taskboard-contract/taskboard/go"
	"github.com/taskboard-contract/taskboard/go/memboard"
)

func ExampleCheck() {
	problems := taskboard.Check([]taskboard.Task{
		{ID: "build", State: taskboard.StateClaimed, Deps: []taskboard.TaskID{"fetch"}},
		{ID: "fetch", State: taskboard.StateOpen, Deps: []taskboard.TaskID{"build"}},
	})
	for _, p := range problems {
		fmt.Printf("%s %s: %s\n", p.Task, p.Code, p.Text)
	}
	// Output:
	// build blocked_claim: claimed while dependency not done: fetch
	// build claimed_without_lease: claimed without owner or lease
	// build dep_cycle: on a dependency cycle: build -> fetch -> build
	// fetch dep_cycle: on a dependency cycle: fetch -> build -> fetch
}

func ExampleConcurrentClaim() {
	board := memboard.New([]taskboard.Task{{ID: "t1", State: taskboard.StateOpen}}, fixedClock{})
	agents := []taskboard.AgentID{"worker", "worker", "worker", "other"}
	winners, err := taskboard.ConcurrentClaim(context.Background(), board, "t1", agents, time.Minute)
	fmt.Println(winners, err)
	// Output: 1 <nil>
}

func ExampleDuplicateTokenSubmit() {
	board := memboard.New([]taskboard.Task{{ID: "t1", State: taskboard.StateOpen}}, fixedClock{})
	successes, err := taskboard.DuplicateTokenSubmit(context.Background(), board, "t1", 8, time.Minute)
	fmt.Println(successes, err)
	// Output: 1 <nil>
}

func ExampleState_Terminal() {
	fmt.Println(taskboard.StateDone.Terminal(), taskboard.StateFailed.Terminal())
	// Output: true false
}
