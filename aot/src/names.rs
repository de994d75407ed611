//! C identifiers for tensor, pool and model names, by the header contract's one rule: every
//! character outside `[A-Za-z0-9_]` becomes `_`; a result that is empty, starts with a digit
//! or is a C keyword gets the prefix `t_`; names that collide after this, or after upper-casing
//! (macros), get `_2`, `_3`, ... in the order given.

use std::collections::{HashMap, HashSet};

/// C11 and C23 keywords (and the C23 predefined constants), which cannot name anything.
const C_KEYWORDS: [&str; 58] = [
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "_Alignas",
    "_Alignof",
    "_Atomic",
    "_Bool",
    "_Complex",
    "_Generic",
    "_Imaginary",
    "_Noreturn",
    "_Static_assert",
    "_Thread_local",
    "alignas",
    "alignof",
    "bool",
    "constexpr",
    "false",
    "nullptr",
    "static_assert",
    "thread_local",
    "true",
    "typeof",
    "typeof_unqual",
    "_BitInt",
    "_Decimal32",
    "_Decimal64",
];

/// One name as a C identifier, before collisions are resolved.
pub fn c_identifier(name: &str) -> String {
    let mut id: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) || C_KEYWORDS.contains(&id.as_str()) {
        id.insert_str(0, "t_");
    }
    id
}

/// Identifiers for `names` (one namespace, in order): distinct as written and upper-cased.
pub fn c_identifiers<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut taken: HashSet<String> = HashSet::new();
    // The next suffix to try per (upper-cased) base: suffixes below it are taken already, so
    // 20,000 tensors of one name are named in linear time.
    let mut next: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for name in names {
        let base = c_identifier(name);
        let mut id = base.clone();
        if taken.contains(&id.to_ascii_uppercase()) {
            let k = next.entry(base.to_ascii_uppercase()).or_insert(2);
            loop {
                id = format!("{base}_{k}");
                *k += 1;
                if !taken.contains(&id.to_ascii_uppercase()) {
                    break;
                }
            }
        }
        taken.insert(id.to_ascii_uppercase());
        out.push(id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        assert_eq!(c_identifier("input:0"), "input_0");
        assert_eq!(c_identifier("3x"), "t_3x");
        assert_eq!(c_identifier("int"), "t_int");
        assert_eq!(c_identifier(""), "t_");
        assert_eq!(c_identifier("conv/out.1"), "conv_out_1");
        assert_eq!(c_identifier("é"), "_");
    }

    #[test]
    fn collisions_get_suffixes_in_order() {
        assert_eq!(c_identifiers(["a.b", "a_b", "a-b", "A_B", "x"]), ["a_b", "a_b_2", "a_b_3", "A_B_4", "x"]);
        // A suffixed name that itself collides keeps counting.
        assert_eq!(c_identifiers(["a", "a_2", "a"]), ["a", "a_2", "a_3"]);
    }
}
