//go:build strandbugs

package replica

// bugsBuild is true: this build lets a test switch historical bugs on.
const bugsBuild = true
