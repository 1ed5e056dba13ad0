package group

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestErrorForCodeInvertsCode(t *testing.T) {
	require.NoError(t, ErrorForCode(0))
	for code, e := range byCode {
		require.Same(t, e, ErrorForCode(code))
		require.Equal(t, code, Code(ErrorForCode(code)))
	}
	unknown := ErrorForCode(999)
	require.Equal(t, int16(999), Code(unknown))
	require.ErrorIs(t, unknown, &Error{Code: 999})
	require.False(t, errors.Is(unknown, ErrUnknownServerError))

	// Every Error errors.go declares is in the table.
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	require.NoError(t, err)
	declared := 0
	ast.Inspect(f, func(n ast.Node) bool {
		if u, ok := n.(*ast.UnaryExpr); ok && u.Op == token.AND {
			if c, ok := u.X.(*ast.CompositeLit); ok {
				if id, ok := c.Type.(*ast.Ident); ok && id.Name == "Error" {
					declared++
				}
			}
		}
		return true
	})
	require.Equal(t, declared, len(byCode), "errors declared in errors.go and listed in codes.go")
}
