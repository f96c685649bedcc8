// Command funclen lists the functions of a tree that are longer than the
// project allows: 120 lines in library code, 250 in tests (files named
// *_test.go). A function literal counts toward the function it sits in,
// and is listed on its own too when it alone is over the limit. CI runs it
// over the repository and fails when it lists anything.
//
//	go run ./internal/funclen [dir]
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const (
	maxLines     = 120
	maxTestLines = 250
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	long, err := scan(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	for _, l := range long {
		fmt.Println(l)
	}
	if len(long) > 0 {
		os.Exit(1)
	}
}

// scan returns a line for each function under root over its limit.
func scan(root string) ([]string, error) {
	var long []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		limit := maxLines
		if strings.HasSuffix(name, "_test.go") {
			limit = maxTestLines
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			what := "function literal"
			switch fn := n.(type) {
			case *ast.FuncDecl:
				body, what = fn.Body, fn.Name.Name
			case *ast.FuncLit:
				body = fn.Body
			}
			if body == nil {
				return true
			}
			start := fset.Position(n.Pos())
			lines := fset.Position(body.End()).Line - start.Line + 1
			if lines > limit {
				long = append(long, fmt.Sprintf("%s:%d: %s is %d lines (at most %d)", path, start.Line, what, lines, limit))
			}
			return true
		})
		return nil
	})
	return long, err
}
