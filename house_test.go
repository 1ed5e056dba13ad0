package strand_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The house rules, as tests (in the manner of pebble's internal/lint).

// TestNames: one name, one meaning across the library's packages.
//
//   - A Config configures a state machine, as etcd raft's Config does:
//     XConfig configures type X, which has a Tick method; a bare Config
//     belongs to a package that has one. What opens files, runs goroutines
//     or is a client takes Options. Kafka's topic configuration keeps its
//     name (log.TopicConfig).
//   - TopicPartition is defined once, in package strand; others alias it.
func TestNames(t *testing.T) {
	fset, pkgs := parseLibrary(t)
	for dir, files := range pkgs {
		ticks := map[string]bool{} // the types with a Tick method
		for _, f := range files {
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.Name == "Tick" {
					ticks[receiverName(fn.Recv.List[0].Type)] = true
				}
			}
		}
		for _, f := range files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					name, where := ts.Name.Name, fset.Position(ts.Pos())
					switch {
					case name == "TopicPartition" && dir != "." && !ts.Assign.IsValid():
						t.Errorf("%s: TopicPartition is strand.TopicPartition: alias it", where)
					case !ts.Name.IsExported() || !strings.HasSuffix(name, "Config") || name == "TopicConfig":
					case name == "Config" && len(ticks) == 0:
						t.Errorf("%s: Config in a package without a state machine (no Tick): name it Options", where)
					case name != "Config" && !ticks[strings.TrimSuffix(name, "Config")]:
						t.Errorf("%s: %s, but %s is no state machine (no Tick): name it %sOptions", where, name,
							strings.TrimSuffix(name, "Config"), strings.TrimSuffix(name, "Config"))
					}
				}
			}
		}
	}
}

// receiverName returns the type name of a method's receiver.
func receiverName(e ast.Expr) string {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// TestGroupStateMachinesImportNoIO: group's state machines (every file but
// the Service's) import only the shared names, the error table and the
// assignors: the log, its batches and the producer state are the
// Service's business, so the coordinators stay pure and testable alone.
func TestGroupStateMachinesImportNoIO(t *testing.T) {
	fset, pkgs := parseLibrary(t)
	allowed := map[string]bool{"github.com/strandlog/strand": true,
		"github.com/strandlog/strand/assign": true, "github.com/strandlog/strand/kafkaerr": true}
	for _, f := range pkgs["group"] {
		name := filepath.Base(fset.Position(f.Pos()).Filename)
		if strings.HasPrefix(name, "service") || name == "pipeline.go" {
			continue
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(path, "github.com/") && !allowed[path] {
				t.Errorf("group/%s imports %s: only the Service's files may", name, path)
			}
		}
	}
}

// parseLibrary parses the library's Go files, tests and examples aside,
// by package folder.
func parseLibrary(t *testing.T) (*token.FileSet, map[string][]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "examples" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fset, pkgs
}
