//go:build race

package segment

func init() { raceEnabled = true }
