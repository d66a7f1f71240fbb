package offheap

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Quantity is a size in bytes that parses Kubernetes-style quantities. It
// implements pflag.Value, so it can back a command-line flag directly.
type Quantity int64

// Set implements pflag.Value.
func (q *Quantity) Set(s string) error {
	n, err := ParseQuantity(s)
	if err != nil {
		return err
	}
	*q = Quantity(n)
	return nil
}

// String implements pflag.Value; it prints the shortest exact form ("2Gi").
func (q *Quantity) String() string { return FormatQuantity(int64(*q)) }

// Type implements pflag.Value.
func (q *Quantity) Type() string { return "quantity" }

// Bytes returns the quantity in bytes.
func (q Quantity) Bytes() int64 { return int64(q) }

const maxQuantityLen = 64

var binarySuffixes = []struct {
	s     string
	shift uint
}{{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}}

var decimalSuffixes = map[string]int{"k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

const suffixHelp = "plain bytes, or a binary suffix Ki, Mi, Gi, Ti, Pi, Ei (optionally followed by B), " +
	"a decimal suffix k, M, G, T, P, E, or an exponent such as 5e9"

// ParseQuantity parses a non-negative size in bytes written as a Kubernetes
// quantity: "536870912", "512Mi", "2Gi", "1.5Gi", "500M", "1e9". As an
// extension the binary and decimal suffixes may be followed by "B" ("8GiB",
// "500MB"), and a bare "B" is allowed. Fractions are rounded up to whole
// bytes, as Kubernetes does. It never panics; errors say what is wrong.
func ParseQuantity(s string) (int64, error) {
	orig := s
	bad := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("invalid size %q: %s", orig, fmt.Sprintf(format, args...))
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return bad("empty (want e.g. 512Mi, 2Gi or a number of bytes)")
	}
	if len(s) > maxQuantityLen {
		return bad("longer than %d characters", maxQuantityLen)
	}
	if s[0] == '-' {
		return bad("negative sizes are not allowed")
	}
	if s[0] == '+' {
		s = s[1:]
	}
	// Mantissa: digits [. digits]
	i := 0
	var intDigits, fracDigits string
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intDigits = s[:i]
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		fracDigits = s[i+1 : j]
		i = j
	}
	if intDigits == "" && fracDigits == "" {
		return bad("must start with a number (%s)", suffixHelp)
	}
	suffix := s[i:]
	num := new(big.Int)
	num.SetString(intDigits+fracDigits, 10) // only digits: cannot fail
	if intDigits+fracDigits == "" {
		num.SetInt64(0)
	}
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fracDigits))), nil)

	unit := suffix
	if len(unit) > 1 && unit[len(unit)-1] == 'B' {
		unit = unit[:len(unit)-1] // "GiB" -> "Gi", "MB" -> "M"
		if unit == "B" || isExponent(unit) {
			return bad("unknown suffix %q (%s)", suffix, suffixHelp)
		}
	}
	switch {
	case unit == "" || unit == "B":
	case isExponent(unit):
		exp, err := strconv.Atoi(unit[1:])
		if err != nil || unit[1] == '+' && len(unit) == 2 {
			return bad("exponent %q is not an integer (%s)", unit, suffixHelp)
		}
		if exp > 30 || exp < -30 {
			return bad("exponent %d out of range", exp)
		}
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
		if exp >= 0 {
			num.Mul(num, p)
		} else {
			den.Mul(den, p)
		}
	default:
		matched := false
		for _, b := range binarySuffixes {
			if unit == b.s {
				num.Lsh(num, b.shift)
				matched = true
				break
			}
		}
		if !matched {
			if e, ok := decimalSuffixes[unit]; ok {
				num.Mul(num, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(e)), nil))
				matched = true
			}
		}
		if !matched {
			hint := ""
			switch strings.ToLower(unit) {
			case "k", "kb":
				hint = ` ("k" is 1000, "Ki" is 1024)`
			case "ki", "mi", "gi", "ti", "pi", "ei", "m", "g", "t", "p":
				hint = " (suffixes are case-sensitive: Ki, Mi, Gi, Ti, Pi, Ei or k, M, G, T, P, E)"
			}
			return bad("unknown suffix %q%s (%s)", suffix, hint, suffixHelp)
		}
	}
	// Round up to whole bytes.
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return bad("larger than %d bytes", int64(math.MaxInt64))
	}
	return q.Int64(), nil
}

// isExponent reports whether a suffix is an exponent ("e9", "E-3"), as
// opposed to a unit ("E", "Ei").
func isExponent(unit string) bool {
	return len(unit) > 1 && (unit[0] == 'e' || unit[0] == 'E') && unit != "Ei"
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// FormatQuantity prints n bytes in the shortest exact binary form: "2Gi",
// "1536Ki", or plain bytes when no binary suffix divides it.
func FormatQuantity(n int64) string {
	if n == 0 {
		return "0"
	}
	if n < 0 {
		if n == math.MinInt64 {
			return strconv.FormatInt(n, 10)
		}
		return "-" + FormatQuantity(-n)
	}
	for i := len(binarySuffixes) - 1; i >= 0; i-- {
		unit := int64(1) << binarySuffixes[i].shift
		if n%unit == 0 {
			return strconv.FormatInt(n/unit, 10) + binarySuffixes[i].s
		}
	}
	return strconv.FormatInt(n, 10)
}
