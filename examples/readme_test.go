// The README's Go blocks are the example programs, or marked regions of
// them: these tests fail when a block and its source part ways, and build
// the README's Postgres quick start as a new user would, in a module of
// its own.
package examples_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/txinbox/inbox/internal/require"
)

// root is the repository, from the examples module's directory.
const root = ".."

// A README block's source is named by a comment line just before it:
//
//	<!-- source: examples/pgx/main.go -->          the whole file
//	<!-- source: examples/kafka/main.go#consumer --> the region between
//	                                                  "// README: begin consumer"
//	                                                  and "// README: end consumer"
var sourceRe = regexp.MustCompile(`^<!-- source: ([^#\s]+)(?:#(\S+))? -->$`)

type block struct {
	line         int // of the opening fence, 1-based
	path, region string
	text         string
}

// readmeBlocks returns the README's ```go blocks with their sources.
func readmeBlocks(t *testing.T) []block {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	defer f.Close()
	var (
		blocks []block
		cur    *block
		source []string // of the last non-blank line, if it named one
		n      int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case line == "```go":
			cur = &block{line: n}
			if source == nil {
				t.Errorf("README.md:%d: a ```go block without a <!-- source: … --> line before it", n)
			} else {
				cur.path, cur.region = source[1], source[2]
			}
		case strings.TrimSpace(line) != "":
			source = sourceRe.FindStringSubmatch(line)
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "README.md: a ```go block is not closed")
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
		if b.path == "" {
			continue
		}
		shown[b.path] = true
		want, err := sourceText(b.path, b.region)
		if err != nil {
			t.Errorf("README.md:%d: %v", b.line, err)
			continue
		}
		if b.text != want {
			t.Errorf("README.md:%d: the block differs from %s%s at %s: copy the source into the README",
				b.line, b.path, regionSuffix(b.region), firstDifference(b.text, want))
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
		if b.path == "examples/pgx/main.go" && b.region == "" {
			quickstart = b.text
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
