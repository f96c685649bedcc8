// Package readme reads the README's marked blocks, for the tests that hold
// the README to the code. A comment line just before a fenced block marks
// it:
//
//	<!-- source: examples/pgx/main.go -->            a Go block: the whole file
//	<!-- source: examples/kafka/main.go#consumer -->  the region between
//	                                                   "// README: begin consumer"
//	                                                   and "// README: end consumer"
//	<!-- output: examples/pgx -->                     an output block: "$ command",
//	                                                   then what it printed
package readme

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Block is one fenced block of the README.
type Block struct {
	// Line is the line of the opening fence, from 1.
	Line int
	// Lang is the fence's language: "go", "sh", or "".
	Lang string
	// Source and Region name a Go block's source file, relative to the
	// repository, and its region in it ("" for the whole file).
	Source, Region string
	// Output names the command an output block shows.
	Output string
	// Text is the block's content, each line ending in a newline.
	Text string
}

var (
	sourceRe = regexp.MustCompile(`^<!-- source: ([^#\s]+)(?:#(\S+))? -->$`)
	outputRe = regexp.MustCompile(`^<!-- output: (.+) -->$`)
)

// Blocks returns the fenced blocks of the Markdown file at path.
func Blocks(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks []Block
		cur    *Block
		mark   string // the last non-blank line before a fence
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
			cur.Text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &Block{Line: n, Lang: strings.TrimPrefix(line, "```")}
			if m := sourceRe.FindStringSubmatch(mark); m != nil {
				cur.Source, cur.Region = m[1], m[2]
			}
			if m := outputRe.FindStringSubmatch(mark); m != nil {
				cur.Output = m[1]
			}
		case strings.TrimSpace(line) != "":
			mark = line
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the block is not closed", path, cur.Line)
	}
	return blocks, nil
}

// Output returns what the output block named name shows the command
// printing: the block without its first line, the "$ command" it shows.
func Output(path, name string) (string, error) {
	blocks, err := Blocks(path)
	if err != nil {
		return "", err
	}
	for _, b := range blocks {
		if b.Output != name {
			continue
		}
		first, rest, ok := strings.Cut(b.Text, "\n")
		if !ok || !strings.HasPrefix(first, "$ ") {
			return "", fmt.Errorf("%s:%d: the output block %q does not start with the command, \"$ …\"", path, b.Line, name)
		}
		return rest, nil
	}
	return "", fmt.Errorf("%s has no block marked <!-- output: %s -->", path, name)
}
