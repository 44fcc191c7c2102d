//! Identities compared as people mean them (DESIGN.md §5): `"Ada"`,
//! `"ada"` and `" Ada "` are one person, so segregation of duties and the
//! intended approvers cannot be side-stepped by case or white space. Every
//! comparison of subjects or roles in `approval` goes through [`same`].

/// The form an identity is compared in: surrounding white space trimmed,
/// Unicode lower case.
pub fn normalise(identity: &str) -> String {
    identity.trim().to_lowercase()
}

/// Whether two identities (subjects or roles) name the same one.
pub fn same(a: &str, b: &str) -> bool {
    normalise(a) == normalise(b)
}

/// Whether `list` holds `identity`, compared normalised.
pub fn contains(list: &[String], identity: &str) -> bool {
    list.iter().any(|x| same(x, identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_white_space_do_not_make_another_person() {
        assert!(same("Ada", "ada"));
        assert!(same("Carol ", "carol"));
        assert!(same("\tÉMILE\n", "émile"));
        assert!(!same("ada", "adam"));
        assert!(contains(&["Ops".to_owned()], " ops"));
    }
}
