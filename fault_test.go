package inbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	denied := errors.New("ERROR: permission denied for table inbox (SQLSTATE 42501)")
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no such host")}
	for _, tt := range []struct {
		name string
		err  error
		want Fault
	}{
		{"nil", nil, FaultNone},
		{"claim denied", atStage(StageClaim, fmt.Errorf("claim: %w: %w", ErrPermissionDenied, denied)), FaultStore},
		{"claim, any code", atStage(StageClaim, errors.New("relation does not exist")), FaultStore},
		{"claim lock timeout", atStage(StageClaim, fmt.Errorf("claim: %w", ErrLockTimeout)), FaultContention},
		{"commit", atStage(StageCommit, fmt.Errorf("commit: %w", ErrUnavailable)), FaultStore},
		{"commit conflict", atStage(StageCommit, fmt.Errorf("commit: %w", ErrConflict)), FaultStore},
		{"dead-letter write", atStage(StageDeadLetter, errors.New("read-only")), FaultStore},
		{"ledger under the handler", atStage(StageHandler, fmt.Errorf("handler: %w", atStage(StageLedger, errors.New("no table")))), FaultStore},
		{"ledger joined", atStage(StageHandler, errors.Join(errors.New("call failed"), atStage(StageLedger, errors.New("x")))), FaultStore},
		{"wrapped again by a batch", fmt.Errorf("inbox: process batch: %w", atStage(StageClaim, errors.New("x"))), FaultStore},
		{"handler io.EOF", atStage(StageHandler, fmt.Errorf("handler: decode: %w", io.EOF)), FaultMessage},
		{"handler unexpected EOF", atStage(StageHandler, fmt.Errorf("handler: %w", io.ErrUnexpectedEOF)), FaultMessage},
		{"handler net.Error", atStage(StageHandler, fmt.Errorf("handler: webhook: %w", opErr)), FaultMessage},
		{"handler, connection lost", atStage(StageHandler, fmt.Errorf("handler: %w: %w", errConnLost, io.EOF)), FaultStore},
		{"handler marked Unavailable", atStage(StageHandler, fmt.Errorf("handler: %w", Unavailable(errors.New("provider down")))), FaultSystemic},
		{"handler wraps ErrUnavailable", atStage(StageHandler, fmt.Errorf("handler: %w", ErrUnavailable)), FaultSystemic},
		{"handler permanent", atStage(StageHandler, fmt.Errorf("handler: %w", Permanent(errors.New("bad")))), FaultPermanent},
		{"handler lock timeout of its own", atStage(StageHandler, fmt.Errorf("handler: %w", ErrLockTimeout)), FaultMessage},
		{"handler panic", atStage(StageHandler, &PanicError{Value: "boom"}), FaultMessage},
		{"key malformed", atStage(StageKey, fmt.Errorf("%w: x", ErrMalformedID)), FaultPermanent},
		{"key none", atStage(StageKey, ErrNoMessageID), FaultPermanent},
		{"key unavailable", atStage(StageKey, Unavailable(errors.New("registry down"))), FaultSystemic},
		{"untagged unavailable", fmt.Errorf("x: %w", ErrUnavailable), FaultStore},
		{"untagged malformed", fmt.Errorf("x: %w", ErrMalformedID), FaultPermanent},
		{"not attempted", ErrNotAttempted, FaultContention},
		{"untagged lock timeout", fmt.Errorf("x: %w", ErrLockTimeout), FaultContention},
		{"untagged plain", errors.New("x"), FaultMessage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Judge(tt.err), "%v", tt.err)
		})
	}
	require.ErrorIs(t, Unavailable(io.EOF), ErrUnavailable)
	require.ErrorIs(t, Unavailable(io.EOF), io.EOF)
	require.Nil(t, Unavailable(nil))
	require.True(t, FaultMessage.Attempt())
	require.False(t, FaultStore.Attempt())
}
