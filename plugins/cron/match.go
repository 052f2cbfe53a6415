package main

import "strings"

// The plugin matches its few fixed patterns by hand rather than with package regexp: regexp
// and the Unicode tables it pulls in were a tenth of the plugin's compiled code, which the host
// validates at every start and keeps in memory while loaded. match_test.go checks each against
// the regular expression it stands for.

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlnum(c byte) bool { return isDigit(c) || isLower(c) || 'A' <= c && c <= 'Z' }

// isJobName matches ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$.
func isJobName(s string) bool {
	if len(s) == 0 || len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// isPlatformName matches ^[a-z][a-z0-9_-]{0,31}$.
func isPlatformName(s string) bool {
	if len(s) == 0 || len(s) > 32 || !isLower(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLower(c) && !isDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// durationUnits are the words splitDuration accepts after the number.
var durationUnits = map[string]bool{
	"s": true, "sec": true, "secs": true, "second": true, "seconds": true,
	"m": true, "min": true, "mins": true, "minute": true, "minutes": true,
	"h": true, "hr": true, "hrs": true, "hour": true, "hours": true,
	"d": true, "day": true, "days": true, "w": true, "week": true, "weeks": true,
}

// splitDuration matches ^(\d+)\s*(unit)$ and returns the number and the unit.
func splitDuration(s string) (num, unit string, ok bool) {
	n := leadingDigits(s)
	if n == 0 {
		return "", "", false
	}
	unit = strings.TrimLeft(s[n:], "\t\n\f\r ")
	if !durationUnits[unit] {
		return "", "", false
	}
	return s[:n], unit, true
}

// splitClock matches ^(\d{1,2})(?::(\d{2}))?\s*(am|pm)?$ and returns its three groups.
func splitClock(s string) (hour, minute, ampm string, ok bool) {
	n := leadingDigits(s)
	if n == 0 || n > 2 {
		return "", "", "", false
	}
	hour, s = s[:n], s[n:]
	if len(s) >= 3 && s[0] == ':' && isDigit(s[1]) && isDigit(s[2]) {
		minute, s = s[1:3], s[3:]
	}
	s = strings.TrimLeft(s, "\t\n\f\r ")
	if s != "" && s != "am" && s != "pm" {
		return "", "", "", false
	}
	return hour, minute, s, true
}

func leadingDigits(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}
