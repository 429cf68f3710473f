package taskboard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The verdicts of a CriterionError.
const (
	// VerdictFault: some call failed with an error the contract does not name (a lost
	// connection, a driver error) or did not return before the context ended.
	VerdictFault = "infrastructure fault"
	// VerdictInconclusive: every error is the contract's, but not the one the criterion
	// races for (ErrBlocked, say: the agents never reached the contention).
	VerdictInconclusive = "inconclusive"
)

// ErrBadCriterion is wrapped by the error a criterion returns for arguments it cannot run
// with: no agents, an empty agent name, no workers, a negative ttl.
var ErrBadCriterion = errors.New("taskboard: bad criterion arguments")

// CriterionError is what a criterion returns when it cannot count winners and losers: a
// call neither won nor lost the way the contract says. An infrastructure fault is never
// counted as a loser, or the criterion would pass on a broken store (nobody won, and
// "at most one winner" holds).
type CriterionError struct {
	// Criterion names the criterion: "ConcurrentClaim" or "DuplicateTokenSubmit".
	Criterion string
	// Verdict is VerdictFault or VerdictInconclusive.
	Verdict string
	// Errs holds every error that was neither a win nor the expected loss.
	Errs []error
}

func (e *CriterionError) Error() string {
	texts := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		texts[i] = err.Error()
	}
	return fmt.Sprintf("taskboard: %s: %s: %s", e.Criterion, e.Verdict, strings.Join(texts, "; "))
}

// Is makes errors.Is see through to every carried error.
func (e *CriterionError) Is(target error) bool {
	for _, err := range e.Errs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// contractErrors are the errors a board may answer with under the contract.
var contractErrors = []error{ErrNotFound, ErrTaken, ErrBlocked, ErrTerminal, ErrLeaseLost, ErrInvalid}

func criterionError(criterion string, errs []error) error {
	verdict := VerdictInconclusive
	for _, err := range errs {
		named := false
		for _, known := range contractErrors {
			named = named || errors.Is(err, known)
		}
		if !named {
			verdict = VerdictFault
		}
	}
	return &CriterionError{Criterion: criterion, Verdict: verdict, Errs: errs}
}

// race runs call(i) for i < n on n goroutines released from one start line, and returns
// how many returned nil and every error that is not loss. A call still running when ctx
// ends counts as ctx's error (its goroutine is left to finish on its own).
func race(ctx context.Context, n int, loss error, call func(i int) error) (int, []error) {
	start := make(chan struct{})
	results := make(chan error, n)
	var ready sync.WaitGroup
	ready.Add(n)
	for i := 0; i < n; i++ {
		go func(i int) {
			ready.Done()
			<-start
			results <- call(i)
		}(i)
	}
	ready.Wait()
	close(start)
	wins := 0
	var errs []error
	for got := 0; got < n; got++ {
		select {
		case err := <-results:
			if err == nil {
				wins++
			} else if !errors.Is(err, loss) {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			for ; got < n; got++ {
				errs = append(errs, fmt.Errorf("a call still running: %w", ctx.Err()))
			}
		}
	}
	return wins, errs
}

// ConcurrentClaim lets every agent claim the same task at once and returns the number of
// winners, which must be exactly 1: an atomic claim has one winner, a read-check-write
// claim lets several agents read the same open task and all win.
//
// One goroutine per agent calls b.Claim(ctx, id, agent, ClaimRequest{TTL: ttl}), all
// released from one start line; names may repeat (agents are not identities, tokens are).
// Every loser must get ErrTaken. The board mints the tokens: the criterion never touches
// them, nor releases the winner's claim. The task should exist, not be done, have every
// dependency done and no live lease.
//
// The error says only that the criterion could not judge, never that someone lost: a
// *CriterionError carrying every error that is not ErrTaken (VerdictFault when one is not
// the contract's, or a claim was still running when ctx ended; else VerdictInconclusive),
// or ErrBadCriterion for no agents, an empty agent name or a negative ttl.
func ConcurrentClaim(ctx context.Context, b Board, id TaskID, agents []AgentID, ttl time.Duration) (int, error) {
	if len(agents) == 0 || ttl < 0 {
		return 0, fmt.Errorf("%w: ConcurrentClaim needs agents and a ttl >= 0", ErrBadCriterion)
	}
	for _, agent := range agents {
		if agent == "" {
			return 0, fmt.Errorf("%w: ConcurrentClaim: an empty agent name", ErrBadCriterion)
		}
	}
	wins, errs := race(ctx, len(agents), ErrTaken, func(i int) error {
		_, err := b.Claim(ctx, id, agents[i], ClaimRequest{TTL: ttl})
		return err
	})
	if errs != nil {
		return wins, criterionError("ConcurrentClaim", errs)
	}
	return wins, nil
}

// DuplicateTokenSubmit claims the task once, then lets workers goroutines complete it with
// that one token at once, and returns the number of successes, which must be exactly 1: a
// complete that checks the token and then writes, in two steps, lets several submitters
// pass the check.
//
// The set-up claim runs as agent "duplicate-token-submit" with ClaimRequest{TTL: ttl} (the
// board mints the token). Every other submitter must get ErrLeaseLost. The task should
// exist, not be done, have every dependency done and no live lease; on success it is left
// done.
//
// The error says only that the criterion could not judge: a *CriterionError carrying the
// set-up claim's error (or a claim that returned no token), or every submitter's error that
// is not ErrLeaseLost, with its verdict as in ConcurrentClaim; or ErrBadCriterion for
// workers < 1 or a negative ttl.
func DuplicateTokenSubmit(ctx context.Context, b Board, id TaskID, workers int, ttl time.Duration) (int, error) {
	if workers < 1 || ttl < 0 {
		return 0, fmt.Errorf("%w: DuplicateTokenSubmit needs workers >= 1 and a ttl >= 0", ErrBadCriterion)
	}
	claimed, err := b.Claim(ctx, id, "duplicate-token-submit", ClaimRequest{TTL: ttl})
	if err == nil && claimed.Lease.Token == "" {
		err = errors.New("the set-up claim returned a task without a lease token")
	}
	if err != nil {
		return 0, criterionError("DuplicateTokenSubmit", []error{fmt.Errorf("the set-up claim: %w", err)})
	}
	wins, errs := race(ctx, workers, ErrLeaseLost, func(int) error {
		return b.Complete(ctx, id, claimed.Lease.Token)
	})
	if errs != nil {
		return wins, criterionError("DuplicateTokenSubmit", errs)
	}
	return wins, nil
}
