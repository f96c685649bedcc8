package fault

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArmFromEnvErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"after-claim":        "want point=probability or point@hit",
		"after-claim=2":      "probability must be between 0 and 1",
		"after-claim@0":      "positive integer",
		"nowhere=0.5":        `unknown fault point "nowhere"`,
		"mid-batch@x,x=0.1":  "positive integer",
		"after-claim=0.1,zz": "want point=probability",
	} {
		t.Setenv("INBOX_FAULTS", spec)
		err := ArmFromEnv()
		require.ErrorContains(t, err, want, spec)
	}
}

func TestHookSeesPoints(t *testing.T) {
	var seen []Point
	ctx := WithHook(context.Background(), func(p Point) { seen = append(seen, p) })
	Inject(ctx, AfterClaim)
	Inject(context.Background(), MidBatch) // no hook in this context
	Inject(ctx, MidBatch)
	require.Equal(t, []Point{AfterClaim, MidBatch}, seen)
}

// A process armed with point@n dies by SIGKILL at exactly the n-th hit.
func TestCrashAtNthHit(t *testing.T) {
	if os.Getenv("FAULT_TEST_CHILD") == "1" {
		if err := ArmFromEnv(); err != nil {
			os.Exit(3)
		}
		for i := 1; i <= 5; i++ {
			os.Stdout.WriteString("hit\n")
			Inject(context.Background(), MidBatch)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashAtNthHit$")
	cmd.Env = append(os.Environ(), "FAULT_TEST_CHILD=1", "INBOX_FAULTS=mid-batch@3")
	out, err := cmd.Output()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled())
	require.Equal(t, syscall.SIGKILL, ws.Signal())
	require.Equal(t, 3, strings.Count(string(out), "hit\n"), "it dies at the third hit, before the fourth")
}
