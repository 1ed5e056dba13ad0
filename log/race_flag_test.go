//go:build race

package log

func init() { raceEnabled = true }
