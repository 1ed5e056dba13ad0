//go:build !strandbugs

package replica

// bugsBuild is false: no historical bug can be switched on.
const bugsBuild = false
