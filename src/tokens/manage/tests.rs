//! The creator's limits, without a store.

use super::*;

fn principal(scopes: &[Scope], roles: &[&str], namespaces: Option<&[&str]>) -> Principal {
    Principal {
        subject: "creator".into(),
        scopes: scopes.iter().copied().collect(),
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        namespaces: Namespaces::from_list(patterns(namespaces).as_deref()),
    }
}

fn patterns(list: Option<&[&str]>) -> Option<Vec<NamespacePattern>> {
    list.map(|l| {
        l.iter()
            .map(|p| NamespacePattern::parse(p).unwrap())
            .collect()
    })
}

fn new(scopes: &[Scope], roles: &[&str], namespaces: Option<&[&str]>) -> NewToken {
    NewToken {
        subject: "made".into(),
        scopes: scopes.to_vec(),
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        namespaces: patterns(namespaces),
        expires_at: None,
    }
}

#[test]
fn a_token_never_holds_more_than_its_creator() {
    let op = principal(
        &[Scope::Operator],
        &["Finance"],
        Some(&["crm", "billing:*"]),
    );
    assert!(within(&op, &new(&[Scope::Operator], &[" finance"], Some(&["crm"]))).is_ok());
    assert!(within(&op, &new(&[Scope::Operator], &[], Some(&["billing:eu*"]))).is_ok());
    for (bad, why) in [
        (
            new(&[Scope::Workflow], &[], Some(&["crm"])),
            "a scope it lacks",
        ),
        (
            new(&[Scope::Operator], &["legal"], Some(&["crm"])),
            "a role it lacks",
        ),
        (new(&[Scope::Operator], &[], None), "every namespace"),
        (
            new(&[Scope::Operator], &[], Some(&["crm*"])),
            "a wider prefix",
        ),
        (
            new(&[Scope::Operator], &[], Some(&["sales"])),
            "another namespace",
        ),
    ] {
        assert!(
            matches!(within(&op, &bad), Err(TokenError::Exceeds(_))),
            "{why}"
        );
    }
    let admin = principal(&[Scope::Admin], &[], None);
    assert!(within(&admin, &new(&[Scope::Admin, Scope::Proxy], &[], None)).is_ok());
}
