// The README's Go blocks are the example programs, or marked regions of
// them: these tests fail when a block and its source part ways, and build
// the README's Postgres quick start as a new user would, in a module of
// its own.
package examples_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/txinbox/inbox/internal/readme"
)

// root is the repository, from the examples module's directory.
const root = ".."

type block = readme.Block

// readmeBlocks returns the README's ```go blocks, each with its source.
func readmeBlocks(t *testing.T) []block {
	t.Helper()
	all, err := readme.Blocks(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	var blocks []block
	for _, b := range all {
		if b.Lang != "go" {
			continue
		}
		if b.Source == "" {
			t.Errorf("README.md:%d: a ```go block without a <!-- source: … --> line before it", b.Line)
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// sourceText returns a file, or one of its regions with the region's
// common indentation removed.
func sourceText(path, region string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		return "", err
	}
	if region == "" {
		return string(b), nil
	}
	begin, end := "// README: begin "+region, "// README: end "+region
	var lines []string
	in, found := false, false
	for _, l := range strings.Split(string(b), "\n") {
		switch strings.TrimSpace(l) {
		case begin:
			in, found = true, true
			continue
		case end:
			in = false
		}
		if in {
			lines = append(lines, l)
		}
	}
	if !found || in {
		return "", fmt.Errorf("%s has no region %q between %q and %q lines", path, region, begin, end)
	}
	indent := ""
	for i, l := range lines {
		lead := l[:len(l)-len(strings.TrimLeft(l, "\t"))]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if i == 0 || len(lead) < len(indent) {
			indent = lead
		}
	}
	var out strings.Builder
	for _, l := range lines {
		out.WriteString(strings.TrimPrefix(l, indent) + "\n")
	}
	return out.String(), nil
}

func TestREADMEBlocksMatchTheirPrograms(t *testing.T) {
	t.Parallel()
	shown := map[string]bool{}
	for _, b := range readmeBlocks(t) {
		if b.Source == "" {
			continue
		}
		shown[b.Source] = true
		want, err := sourceText(b.Source, b.Region)
		if err != nil {
			t.Errorf("README.md:%d: %v", b.Line, err)
			continue
		}
		if b.Text != want {
			t.Errorf("README.md:%d: the block differs from %s%s at %s: copy the source into the README",
				b.Line, b.Source, regionSuffix(b.Region), firstDifference(b.Text, want))
		}
	}
	for _, p := range []string{"examples/pgx/main.go", "examples/sqlite/main.go", "examples/kafka/main.go"} {
		require.True(t, shown[p], "the README shows no part of %s", p)
	}
}

func regionSuffix(r string) string {
	if r == "" {
		return ""
	}
	return "#" + r
}

// firstDifference says where two texts first differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the block: README %q, source %q", i+1, gl, wl)
		}
	}
	return "the end"
}

// The README's Postgres quick start builds as a program of its own, in a new
// module that requires the inbox modules (replaced by this checkout, which is
// what a user's build fetches).
func TestREADMEQuickStartBuildsInANewModule(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is required in CI: %v", err)
		}
		t.Skipf("no go command: %v", err)
	}
	var quickstart string
	for _, b := range readmeBlocks(t) {
		if b.Source == "examples/pgx/main.go" && b.Region == "" {
			quickstart = b.Text
		}
	}
	require.NotEmpty(t, quickstart, "the README shows examples/pgx/main.go whole")
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module quickstart\n\ngo 1.26.0\n\n" +
		"replace github.com/txinbox/inbox => " + abs + "\n\n" +
		"replace github.com/txinbox/inbox/inboxpgx => " + filepath.Join(abs, "inboxpgx") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(quickstart), 0o644))
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", os.DevNull, "."}} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in a new module:\n%s", strings.Join(args, " "), out)
	}
}
