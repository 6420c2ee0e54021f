package calibrate

import (
	"errors"
	"math"
	"slices"
)

// errNoConvergence means the active-set iterations did not settle, which
// for a well-posed problem only happens with NaN or infinite inputs.
var errNoConvergence = errors.New("nnls: no convergence")

// nnls solves min ‖A·x − b‖ subject to x ≥ 0 with Lawson and Hanson's
// active-set method (Solving Least Squares Problems, 1974, ch. 23). A has
// one row per observation. Columns are scaled to unit norm first, which
// keeps the method's tolerances meaningful when the columns differ by many
// orders of magnitude (u is ~10³, u·c ~10⁷); a positive scale does not change
// which x are feasible. A column of zeros gets 0.
//
// The package writes its own solver rather than taking a library: the cost
// model has three unknowns, the method is some sixty lines, and the Go
// numeric libraries we could use (gonum) offer unconstrained least squares
// and general optimizers, not NNLS, so a dependency would bring more code
// than it saves.
func nnls(a [][]float64, b []float64) ([]float64, error) {
	as, scale, bnorm, err := scaleColumns(a, b)
	if err != nil {
		return nil, err
	}
	m, n := len(a), len(scale)

	x := make([]float64, n)
	passive := make([]bool, n) // the set P: columns free to move
	tol := 1e-12 * math.Max(bnorm, 1e-300) * float64(max(m, n))
	w := make([]float64, n)
	for iter := 0; ; iter++ {
		if iter > 30*n+30 {
			return nil, errNoConvergence
		}
		gradient(as, b, x, w)
		t := -1
		for j := range n {
			if !passive[j] && scale[j] > 0 && w[j] > tol && (t < 0 || w[j] > w[t]) {
				t = j
			}
		}
		if t < 0 {
			break // Kuhn–Tucker conditions hold
		}
		passive[t] = true
		for inner := 0; ; inner++ {
			if inner > 30*n+30 {
				return nil, errNoConvergence
			}
			s := lstsq(as, b, passive)
			if inner == 0 && s[t] <= 0 {
				// Rounding: the column the gradient chose cannot lower the
				// residual after all, so the Kuhn–Tucker conditions hold
				// as well as arithmetic can tell.
				passive[t] = false
				return unscale(x, scale)
			}
			feasible := true
			alpha := math.Inf(1)
			for j := range n {
				if passive[j] && s[j] <= 0 {
					feasible = false
					if d := x[j] - s[j]; d > 0 {
						alpha = math.Min(alpha, x[j]/d)
					} else {
						alpha = 0
					}
				}
			}
			if feasible {
				copy(x, s)
				break
			}
			// Step from x towards s as far as feasibility allows, then
			// release every column that reached zero.
			for j := range n {
				x[j] += alpha * (s[j] - x[j])
				if passive[j] && x[j] <= tol*1e-3 {
					passive[j], x[j] = false, 0
				}
			}
			// The column just freed may be the one whose step stalled;
			// with no passive column left there is nothing to solve.
			if !anyTrue(passive) {
				break
			}
		}
	}
	return unscale(x, scale)
}

// scaleColumns checks the problem's shape and values and returns A with
// its columns scaled to unit norm, the scales, and the norm of b.
func scaleColumns(a [][]float64, b []float64) (as [][]float64, scale []float64, bnorm float64, err error) {
	m := len(a)
	if m == 0 || m != len(b) {
		return nil, nil, 0, errors.New("nnls: need as many observations as targets, and at least one")
	}
	n := len(a[0])
	scale = make([]float64, n)
	for _, row := range a {
		if len(row) != n {
			return nil, nil, 0, errors.New("nnls: rows of different lengths")
		}
		for j, v := range row {
			scale[j] += v * v
		}
	}
	for _, v := range b {
		bnorm += v * v
	}
	for _, s := range append(slices.Clone(scale), bnorm) {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return nil, nil, 0, errors.New("nnls: values must be finite, and small enough to square")
		}
	}
	bnorm = math.Sqrt(bnorm)
	for j := range scale {
		scale[j] = math.Sqrt(scale[j])
	}
	as = make([][]float64, m)
	for i, row := range a {
		as[i] = make([]float64, n)
		for j, v := range row {
			if scale[j] > 0 {
				as[i][j] = v / scale[j]
			}
		}
	}
	return as, scale, bnorm, nil
}

// unscale turns a solution for unit-norm columns back into one for the
// columns as given.
func unscale(x, scale []float64) ([]float64, error) {
	for j := range x {
		if math.IsNaN(x[j]) || math.IsInf(x[j], 0) {
			return nil, errNoConvergence
		}
		if scale[j] > 0 {
			x[j] /= scale[j]
		} else {
			x[j] = 0
		}
	}
	return x, nil
}

// gradient sets w to Aᵀ·(b − A·x), the direction in which the residual
// falls fastest.
func gradient(a [][]float64, b, x, w []float64) {
	clear(w)
	for i, row := range a {
		r := b[i]
		for j, v := range row {
			r -= v * x[j]
		}
		for j, v := range row {
			w[j] += v * r
		}
	}
}

func anyTrue(s []bool) bool {
	for _, v := range s {
		if v {
			return true
		}
	}
	return false
}

// lstsq returns the unconstrained least squares solution over the columns
// in use, zero elsewhere, by Householder QR (more stable than the normal
// equations when columns are nearly parallel). A column that is, to
// rounding, a combination of the ones before it gets 0.
func lstsq(a [][]float64, b []float64, use []bool) []float64 {
	m, n := len(a), len(use)
	cols := make([]int, 0, n)
	for j, u := range use {
		if u {
			cols = append(cols, j)
		}
	}
	k := len(cols)
	// r holds the chosen columns, column-major; y is b, both transformed
	// in place by the reflections.
	r := make([][]float64, k)
	for c, j := range cols {
		r[c] = make([]float64, m)
		for i := range m {
			r[c][i] = a[i][j]
		}
	}
	y := append([]float64(nil), b...)
	diag := make([]float64, k)
	for c := 0; c < k && c < m; c++ {
		col := r[c]
		var norm float64
		for i := c; i < m; i++ {
			norm += col[i] * col[i]
		}
		norm = math.Sqrt(norm)
		if norm == 0 {
			continue
		}
		alpha := -math.Copysign(norm, col[c])
		// v = col[c:] − alpha·e1, kept in col[c:]; the reflection maps col
		// to alpha·e1.
		col[c] -= alpha
		var vv float64
		for i := c; i < m; i++ {
			vv += col[i] * col[i]
		}
		reflect := func(z []float64) {
			var dot float64
			for i := c; i < m; i++ {
				dot += col[i] * z[i]
			}
			f := 2 * dot / vv
			for i := c; i < m; i++ {
				z[i] -= f * col[i]
			}
		}
		for c2 := c + 1; c2 < k; c2++ {
			reflect(r[c2])
		}
		reflect(y)
		diag[c] = alpha
	}
	// Back substitution on R·z = Qᵀb.
	var biggest float64
	for _, d := range diag {
		biggest = math.Max(biggest, math.Abs(d))
	}
	z := make([]float64, k)
	for c := k - 1; c >= 0; c-- {
		if c >= m || math.Abs(diag[c]) <= 1e-12*biggest {
			continue // dependent column: leave it at 0
		}
		s := y[c]
		for c2 := c + 1; c2 < k; c2++ {
			s -= r[c2][c] * z[c2]
		}
		z[c] = s / diag[c]
	}
	out := make([]float64, n)
	for c, j := range cols {
		out[j] = z[c]
	}
	return out
}
