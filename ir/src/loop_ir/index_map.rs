//! `IndexMap`: a layout transform from a buffer's logical index to its physical index, written in
//! the seed's lambda syntax, e.g. `lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4]`.
//!
//! Final indices are affine in the seed's sense: sums of integer multiples of variables and of
//! `//` and `%` by positive constants (splits, fuses and reorders). A map must be injective over
//! the buffer's shape; [`IndexMap::check_injective`] verifies it.

use std::fmt;

/// An index expression over the map's variables.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MapExpr {
    Var(usize),
    Const(i64),
    Add(Box<MapExpr>, Box<MapExpr>),
    Sub(Box<MapExpr>, Box<MapExpr>),
    Mul(Box<MapExpr>, Box<MapExpr>),
    FloorDiv(Box<MapExpr>, Box<MapExpr>),
    FloorMod(Box<MapExpr>, Box<MapExpr>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexMap {
    /// Names of the initial (logical) index variables.
    pub vars: Vec<String>,
    /// Final (physical) index expressions, one per transformed axis.
    pub exprs: Vec<MapExpr>,
    /// Positions in `exprs` where a new physical axis starts (from `AXIS_SEPARATOR`s).
    pub axis_separators: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IndexMapError {
    #[error("malformed index map at column {column}: {message} (in `{text}`)")]
    Parse { text: String, column: usize, message: String },
    #[error("index map uses unknown variable '{0}'")]
    UnknownVariable(String),
    #[error("index map takes {vars} indices but the buffer has rank {rank}")]
    RankMismatch { vars: usize, rank: usize },
    #[error("index map is not affine: {0}")]
    NotAffine(String),
    #[error("index map can produce negative index {min} on axis {axis}")]
    Negative { axis: usize, min: i64 },
    #[error("index map is not injective: logical indices {a:?} and {b:?} both map to {physical:?}")]
    NotInjective { a: Vec<i64>, b: Vec<i64>, physical: Vec<i64> },
    #[error("buffer of {0} elements is too large to check the index map's injectivity")]
    TooLarge(usize),
}

/// Largest logical domain checked exhaustively for injectivity.
const MAX_CHECKED_ELEMENTS: usize = 1 << 27;

impl MapExpr {
    pub fn eval(&self, idx: &[i64]) -> i64 {
        match self {
            MapExpr::Var(i) => idx[*i],
            MapExpr::Const(c) => *c,
            MapExpr::Add(a, b) => a.eval(idx) + b.eval(idx),
            MapExpr::Sub(a, b) => a.eval(idx) - b.eval(idx),
            MapExpr::Mul(a, b) => a.eval(idx) * b.eval(idx),
            MapExpr::FloorDiv(a, b) => a.eval(idx).div_euclid(b.eval(idx)),
            MapExpr::FloorMod(a, b) => a.eval(idx).rem_euclid(b.eval(idx)),
        }
    }

    /// Inclusive value range when every variable `i` ranges over `0..extents[i]`.
    /// The variables this expression reads (with repeats).
    pub fn mentions(&self, out: &mut Vec<usize>) {
        match self {
            MapExpr::Var(i) => out.push(*i),
            MapExpr::Const(_) => {}
            MapExpr::Add(a, b)
            | MapExpr::Sub(a, b)
            | MapExpr::Mul(a, b)
            | MapExpr::FloorDiv(a, b)
            | MapExpr::FloorMod(a, b) => {
                a.mentions(out);
                b.mentions(out);
            }
        }
    }

    fn range(&self, extents: &[usize]) -> (i64, i64) {
        match self {
            MapExpr::Var(i) => (0, extents[*i] as i64 - 1),
            MapExpr::Const(c) => (*c, *c),
            MapExpr::Add(a, b) => {
                let (x, y) = (a.range(extents), b.range(extents));
                (x.0 + y.0, x.1 + y.1)
            }
            MapExpr::Sub(a, b) => {
                let (x, y) = (a.range(extents), b.range(extents));
                (x.0 - y.1, x.1 - y.0)
            }
            MapExpr::Mul(a, b) => {
                let (x, y) = (a.range(extents), b.range(extents));
                let c = [x.0 * y.0, x.0 * y.1, x.1 * y.0, x.1 * y.1];
                (*c.iter().min().expect("4"), *c.iter().max().expect("4"))
            }
            MapExpr::FloorDiv(a, b) => {
                let (x, c) = (a.range(extents), b.constant().unwrap_or(1));
                (x.0.div_euclid(c), x.1.div_euclid(c))
            }
            MapExpr::FloorMod(a, b) => {
                let (x, c) = (a.range(extents), b.constant().unwrap_or(1));
                if x.0.div_euclid(c) == x.1.div_euclid(c) { (x.0.rem_euclid(c), x.1.rem_euclid(c)) } else { (0, c - 1) }
            }
        }
    }

    fn constant(&self) -> Option<i64> {
        match self {
            MapExpr::Const(c) => Some(*c),
            _ => None,
        }
    }

    /// Affine in the seed's sense: products need a constant side, `//` and `%` a positive
    /// constant divisor.
    fn check_affine(&self, names: &[String]) -> Result<(), String> {
        match self {
            MapExpr::Var(_) | MapExpr::Const(_) => Ok(()),
            MapExpr::Add(a, b) | MapExpr::Sub(a, b) => {
                a.check_affine(names)?;
                b.check_affine(names)
            }
            MapExpr::Mul(a, b) => {
                if a.constant().is_none() && b.constant().is_none() {
                    return Err(format!("product of two non-constant terms in `{}`", Named(self, names)));
                }
                a.check_affine(names)?;
                b.check_affine(names)
            }
            MapExpr::FloorDiv(a, b) | MapExpr::FloorMod(a, b) => match b.constant() {
                Some(c) if c > 0 => a.check_affine(names),
                _ => Err(format!("`{}` needs a positive constant divisor", Named(self, names))),
            },
        }
    }

    fn fmt_with(&self, f: &mut fmt::Formatter<'_>, names: &[String], prec: u8) -> fmt::Result {
        let (text_prec, l, r, op) = match self {
            MapExpr::Var(i) => return f.write_str(names.get(*i).map_or("?", |s| s.as_str())),
            MapExpr::Const(c) => return write!(f, "{c}"),
            MapExpr::Add(a, b) => (1, a, b, " + "),
            MapExpr::Sub(a, b) => (1, a, b, " - "),
            MapExpr::Mul(a, b) => (2, a, b, " * "),
            MapExpr::FloorDiv(a, b) => (2, a, b, " // "),
            MapExpr::FloorMod(a, b) => (2, a, b, " % "),
        };
        if text_prec < prec {
            f.write_str("(")?;
        }
        l.fmt_with(f, names, text_prec)?;
        f.write_str(op)?;
        r.fmt_with(f, names, text_prec + 1)?;
        if text_prec < prec {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A map expression displayed with its variables' names.
struct Named<'a>(&'a MapExpr, &'a [String]);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_with(f, self.1, 0)
    }
}

impl IndexMap {
    /// Parses `lambda a, b, ...: [expr, ..., AXIS_SEPARATOR, ...]`.
    pub fn parse(text: &str) -> Result<IndexMap, IndexMapError> {
        Parser { text, pos: 0, vars: vec![] }.map()
    }

    /// The identity map on `rank` axes.
    pub fn identity(rank: usize) -> IndexMap {
        IndexMap {
            vars: (0..rank).map(|i| format!("i{i}")).collect(),
            exprs: (0..rank).map(MapExpr::Var).collect(),
            axis_separators: vec![],
        }
    }

    pub fn apply(&self, idx: &[i64]) -> Vec<i64> {
        self.exprs.iter().map(|e| e.eval(idx)).collect()
    }

    /// Checks rank and affinity, and returns the transformed shape: per final index, one past
    /// its largest value over `shape`, except that a final index `e % k` always spans the `k`
    /// positions of a split (as TVM's layouts do): splits that do not divide pad the buffer to
    /// whole tiles, even when the axis is shorter than one tile.
    pub fn transformed_shape(&self, shape: &[usize]) -> Result<Vec<usize>, IndexMapError> {
        if self.vars.len() != shape.len() {
            return Err(IndexMapError::RankMismatch { vars: self.vars.len(), rank: shape.len() });
        }
        self.exprs.iter().try_for_each(|e| e.check_affine(&self.vars).map_err(IndexMapError::NotAffine))?;
        if shape.contains(&0) {
            return Ok(vec![0; self.exprs.len()]);
        }
        self.exprs
            .iter()
            .enumerate()
            .map(|(axis, e)| {
                let (lo, hi) = e.range(shape);
                let tile = match e {
                    MapExpr::FloorMod(_, k) => match **k {
                        MapExpr::Const(k) if k > 0 => k as usize,
                        _ => 0,
                    },
                    _ => 0,
                };
                if lo < 0 { Err(IndexMapError::Negative { axis, min: lo }) } else { Ok((hi as usize + 1).max(tile)) }
            })
            .collect()
    }

    /// Whether every variable reaches the result either alone (`v`) or split (`v // k` and
    /// `v % k`, one each, the same `k`), and each result mentions at most one variable: splits
    /// and reorders, injective by construction (packed layouts), so no element needs visiting.
    fn is_split_permutation(&self) -> bool {
        let mut uses: Vec<Vec<&MapExpr>> = vec![Vec::new(); self.vars.len()];
        for e in &self.exprs {
            match e {
                MapExpr::Const(_) => {}
                MapExpr::Var(i) => uses[*i].push(e),
                MapExpr::FloorDiv(a, k) | MapExpr::FloorMod(a, k) => match (&**a, &**k) {
                    (MapExpr::Var(i), MapExpr::Const(k)) if *k > 0 => uses[*i].push(e),
                    _ => return false,
                },
                _ => return false,
            }
        }
        uses.iter().all(|u| match u.as_slice() {
            [MapExpr::Var(_)] => true,
            [a, b] => match (a, b) {
                (MapExpr::FloorDiv(_, k1), MapExpr::FloorMod(_, k2))
                | (MapExpr::FloorMod(_, k2), MapExpr::FloorDiv(_, k1)) => k1 == k2,
                _ => false,
            },
            _ => false,
        })
    }

    /// Verifies that no two logical indices of `shape` share a physical index.
    pub fn check_injective(&self, shape: &[usize]) -> Result<(), IndexMapError> {
        let out = self.transformed_shape(shape)?;
        // A permutation of the axes (a transpose) is injective: no need to visit every element.
        let mut axes: Vec<usize> =
            self.exprs.iter().filter_map(|e| if let MapExpr::Var(i) = e { Some(*i) } else { None }).collect();
        axes.sort_unstable();
        if self.exprs.len() == shape.len() && axes.len() == shape.len() && axes.iter().enumerate().all(|(k, &a)| k == a)
        {
            return Ok(());
        }
        if self.is_split_permutation() {
            return Ok(());
        }
        let n: usize = shape.iter().product();
        let m: usize = out.iter().product();
        if n > MAX_CHECKED_ELEMENTS || m > 8 * MAX_CHECKED_ELEMENTS {
            return Err(IndexMapError::TooLarge(n));
        }
        let mut seen: Vec<u32> = vec![u32::MAX; m];
        let mut idx = vec![0i64; shape.len()];
        for flat in 0..n {
            let mut r = flat;
            for d in (0..shape.len()).rev() {
                idx[d] = (r % shape[d]) as i64;
                r /= shape[d];
            }
            let phys = self.apply(&idx);
            let p = phys.iter().zip(&out).fold(0usize, |acc, (&i, &d)| acc * d + i as usize);
            if seen[p] != u32::MAX {
                let mut a = vec![0i64; shape.len()];
                let mut r = seen[p] as usize;
                for d in (0..shape.len()).rev() {
                    a[d] = (r % shape[d]) as i64;
                    r /= shape[d];
                }
                return Err(IndexMapError::NotInjective { a, b: idx, physical: phys });
            }
            seen[p] = flat as u32;
        }
        Ok(())
    }

    /// Physical shape after flattening each separator-delimited group of the transformed shape.
    pub fn physical_shape(&self, transformed: &[usize]) -> Vec<usize> {
        group_bounds(&self.axis_separators, transformed.len())
            .into_iter()
            .map(|(a, b)| transformed[a..b].iter().product())
            .collect()
    }

    /// Physical (flattened) index of a logical index.
    pub fn physical_index(&self, transformed: &[usize], idx: &[i64]) -> Vec<i64> {
        let t = self.apply(idx);
        group_bounds(&self.axis_separators, transformed.len())
            .into_iter()
            .map(|(a, b)| (a..b).fold(0i64, |acc, d| acc * transformed[d] as i64 + t[d]))
            .collect()
    }
}

/// `[start, end)` ranges of the axis groups that `separators` cut `rank` axes into.
pub fn group_bounds(separators: &[usize], rank: usize) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> = separators.iter().copied().filter(|&s| s > 0 && s < rank).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut bounds = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for c in cuts {
        bounds.push((start, c));
        start = c;
    }
    bounds.push((start, rank));
    bounds
}

impl fmt::Display for IndexMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lambda {}: [", self.vars.join(", "))?;
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            if std::mem::replace(&mut first, false) { Ok(()) } else { f.write_str(", ") }
        };
        for i in 0..=self.exprs.len() {
            for _ in self.axis_separators.iter().filter(|&&s| s == i) {
                sep(f)?;
                f.write_str("AXIS_SEPARATOR")?;
            }
            if let Some(e) = self.exprs.get(i) {
                sep(f)?;
                e.fmt_with(f, &self.vars, 0)?;
            }
        }
        f.write_str("]")
    }
}

struct Parser<'t> {
    text: &'t str,
    pos: usize,
    vars: Vec<String>,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> IndexMapError {
        IndexMapError::Parse { text: self.text.to_string(), column: self.pos + 1, message: message.into() }
    }

    fn skip_ws(&mut self) {
        while self.text[self.pos..].starts_with(char::is_whitespace) {
            self.pos += self.text[self.pos..].chars().next().map_or(1, char::len_utf8);
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        if self.text[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> Result<(), IndexMapError> {
        if self.eat(s) { Ok(()) } else { Err(self.err(format!("expected `{s}`"))) }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_ws();
        let rest = &self.text[self.pos..];
        let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len());
        if len == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.pos += len;
        Some(rest[..len].to_string())
    }

    fn map(mut self) -> Result<IndexMap, IndexMapError> {
        if self.ident().as_deref() != Some("lambda") {
            return Err(self.err("expected `lambda`"));
        }
        loop {
            if self.eat(":") {
                break;
            }
            if !self.vars.is_empty() {
                self.expect(",")?;
            }
            let v = self.ident().ok_or_else(|| self.err("expected a variable name"))?;
            if v.contains('.') || self.vars.contains(&v) {
                return Err(self.err(format!("invalid or repeated variable `{v}`")));
            }
            self.vars.push(v);
        }
        self.expect("[")?;
        let (mut exprs, mut seps) = (Vec::new(), Vec::new());
        loop {
            if self.eat("]") {
                break;
            }
            if !exprs.is_empty() || !seps.is_empty() {
                self.expect(",")?;
            }
            let save = self.pos;
            if let Some(id) = self.ident()
                && id.rsplit('.').next() == Some("AXIS_SEPARATOR")
            {
                seps.push(exprs.len());
                continue;
            }
            self.pos = save;
            exprs.push(self.sum()?);
        }
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.err("unexpected text after `]`"));
        }
        Ok(IndexMap { vars: self.vars, exprs, axis_separators: seps })
    }

    fn sum(&mut self) -> Result<MapExpr, IndexMapError> {
        let mut e = self.product()?;
        loop {
            if self.eat("+") {
                e = MapExpr::Add(Box::new(e), Box::new(self.product()?));
            } else if self.eat("-") {
                e = MapExpr::Sub(Box::new(e), Box::new(self.product()?));
            } else {
                return Ok(e);
            }
        }
    }

    fn product(&mut self) -> Result<MapExpr, IndexMapError> {
        let mut e = self.atom()?;
        loop {
            if self.eat("//") {
                e = MapExpr::FloorDiv(Box::new(e), Box::new(self.atom()?));
            } else if self.eat("*") {
                e = MapExpr::Mul(Box::new(e), Box::new(self.atom()?));
            } else if self.eat("%") {
                e = MapExpr::FloorMod(Box::new(e), Box::new(self.atom()?));
            } else if self.text[self.pos..].trim_start().starts_with('/') {
                return Err(self.err("use `//` for integer division"));
            } else {
                return Ok(e);
            }
        }
    }

    fn atom(&mut self) -> Result<MapExpr, IndexMapError> {
        if self.eat("(") {
            let e = self.sum()?;
            self.expect(")")?;
            return Ok(e);
        }
        if self.eat("-") {
            return Ok(MapExpr::Sub(Box::new(MapExpr::Const(0)), Box::new(self.atom()?)));
        }
        self.skip_ws();
        let rest = &self.text[self.pos..];
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits > 0 {
            let v = rest[..digits].parse::<i64>().map_err(|_| self.err("integer too large"))?;
            self.pos += digits;
            return Ok(MapExpr::Const(v));
        }
        match self.ident() {
            Some(name) => match self.vars.iter().position(|v| *v == name) {
                Some(i) => Ok(MapExpr::Var(i)),
                None => Err(IndexMapError::UnknownVariable(name)),
            },
            None => Err(self.err("expected a number, a variable or `(`")),
        }
    }
}
