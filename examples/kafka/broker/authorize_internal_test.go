package broker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// unauthorizedAPIs are the APIs Kafka serves to anyone: the versions, and
// SASL's own, which a client sends before it is anyone.
var unauthorizedAPIs = map[int16]bool{18: true, 17: true, 36: true}

// authorizing are the calls that check a request against the ACLs.
var authorizing = map[string]bool{"deny": true, "allowed": true, "aclRefusal": true, "denyConfigs": true, "denyTopics": true, "describable": true}

// A house rule, as KafkaApis has one authorize call or more per API:
// every API the broker serves, but those anyone may send, checks the
// ACLs, in its handler or in a method of the broker its handler calls.
func TestEveryServedAPIIsAuthorized(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	methods := map[string]*ast.FuncDecl{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				methods[fd.Name.Name] = fd
			}
		}
	}
	// calls are the names of the methods a function calls on anything.
	calls := func(fd *ast.FuncDecl) []string {
		var out []string
		ast.Inspect(fd, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					out = append(out, sel.Sel.Name)
				}
			}
			return true
		})
		return out
	}
	authorizes := func(fd *ast.FuncDecl) bool {
		for _, c := range calls(fd) {
			if authorizing[c] {
				return true
			}
		}
		return false
	}
	b := &Broker{}
	for key, a := range servedAPIs() {
		if unauthorizedAPIs[key] {
			continue
		}
		name := runtime.FuncForPC(reflect.ValueOf(a.serve(b)).Pointer()).Name()
		name = strings.TrimSuffix(name[strings.LastIndex(name, ".")+1:], "-fm")
		fd := methods[name]
		require.NotNil(t, fd, "handler %s of %s", name, kmsg.NameForKey(key))
		ok := authorizes(fd)
		for _, c := range calls(fd) {
			if callee := methods[c]; !ok && callee != nil && callee != fd {
				ok = authorizes(callee)
			}
		}
		require.True(t, ok, "%s (%s) checks no ACL", kmsg.NameForKey(key), name)
	}
}
