package group

import (
	"regexp"
	"slices"
)

// topicRegex is a member's subscription by regular expression and the
// topics it matched when the group's subscriptions were last computed.
type topicRegex struct {
	source  string
	re      *regexp.Regexp // nil for none, or one that does not compile
	matched []string       // sorted
}

// compileTopicRegex compiles a subscription's regular expression so that
// it must match a topic's whole name, as Kafka's Pattern.matches.
func compileTopicRegex(s string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + s + `)$`)
}

// set replaces the expression; "" removes it. An expression read back from
// the offsets topic was checked when it was written; one that does not
// compile there matches nothing.
func (r *topicRegex) set(s string) {
	r.source, r.re, r.matched = s, nil, nil
	if s != "" {
		r.re, _ = compileTopicRegex(s)
	}
}

func (r *topicRegex) String() string { return r.source }

// subscription returns the topics a member subscribes to: by name, and
// those its regular expression matched.
func (m *consumerMember) subscription() []string {
	if len(m.regex.matched) == 0 {
		return m.topics
	}
	out := append(slices.Clone(m.topics), m.regex.matched...)
	slices.Sort(out)
	return slices.Compact(out)
}

// resolveRegexes matches the group's regular expressions against the
// topics Config.Topics lists (Kafka's coordinator refreshes them as topics
// change; here every computation of the group's subscriptions does).
func (c *Coordinator) resolveRegexes(g *consumerGroup) {
	var topics []string
	listed := false
	for _, m := range g.members {
		if m.regex.re == nil {
			continue
		}
		if !listed {
			if c.cfg.Topics != nil {
				topics = c.cfg.Topics()
			}
			listed = true
		}
		m.regex.matched = m.regex.matched[:0]
		for _, t := range topics {
			if m.regex.re.MatchString(t) {
				m.regex.matched = append(m.regex.matched, t)
			}
		}
		slices.Sort(m.regex.matched)
	}
}
