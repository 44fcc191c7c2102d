//! Tokens made at run time (DESIGN.md §5): create (the token shown once),
//! list (never a token, never a digest), revoke. Shared by the API, the
//! console and, over the API, the CLI.
//!
//! A token never holds more than the principal that makes it: each scope
//! must be held by the creator (admin holds every scope), each role must
//! be one of the creator's, and its namespaces must lie inside the
//! creator's allow-list (a creator with a list cannot make a token for
//! every namespace). Tokens of the config file are listed as read-only.

use secrecy::SecretString;

use super::authenticator::Authenticator;
use super::port::{StoredToken, TokenStore};
use super::{digest, generate_token, id_of, NamespacePattern, Namespaces, Principal, Scope};
use crate::clock::{Clock, Millis};
use crate::ledger::storage::StoreError;

/// The longest subject a token may name.
pub const MAX_SUBJECT: usize = 200;

/// What a new token should be.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The person or workflow it speaks for.
    pub subject: String,
    /// What it may do (at least one).
    pub scopes: Vec<Scope>,
    /// Roles, for approval policies.
    pub roles: Vec<String>,
    /// The namespaces it reaches; `None`, every namespace.
    pub namespaces: Option<Vec<NamespacePattern>>,
    /// When it stops working; `None`, never.
    pub expires_at: Option<Millis>,
}

/// Why a token was not made or revoked. Nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A field is malformed.
    #[error("{field}: {message}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The new token would hold more than its creator.
    #[error("{0}")]
    Exceeds(String),
    /// No stored token has that id.
    #[error("no token has the id {0:?}")]
    NotFound(String),
    /// The token is in the config file, or already revoked.
    #[error("{0}")]
    Conflict(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a token comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `[[tokens]]` in the config file: read-only here.
    Config,
    /// Stored in the database (made at run time, or at first start).
    Stored,
}

/// A token as lists show it: never the token, never its digest.
#[derive(Debug, Clone)]
pub struct TokenView {
    /// Its public handle.
    pub id: String,
    /// Where it comes from.
    pub source: Source,
    /// The person or workflow it speaks for.
    pub subject: String,
    /// Scope names.
    pub scopes: Vec<String>,
    /// Roles.
    pub roles: Vec<String>,
    /// Its namespace patterns; `None`, every namespace.
    pub namespaces: Option<Vec<String>>,
    /// Who made it (`None`: the config file or the first start).
    pub created_by: Option<String>,
    /// When it was stored (`None` for the config file).
    pub created_at: Option<Millis>,
    /// When it stops working.
    pub expires_at: Option<Millis>,
    /// When it was revoked.
    pub revoked_at: Option<Millis>,
    /// `active`, `expired` or `revoked`.
    pub state: &'static str,
}

/// A token just made: the token itself (shown once, never stored) and how
/// it is listed.
#[derive(Debug)]
pub struct Created {
    /// The token.
    pub secret: SecretString,
    /// How it is listed from now on.
    pub view: TokenView,
}

/// The token use cases over a store.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    /// Where stored tokens live.
    pub store: &'a dyn TokenStore,
    /// The table of known tokens (its cache is told of revocations).
    pub auth: &'a Authenticator,
    /// Expiry.
    pub clock: &'a dyn Clock,
}

impl Tokens<'_> {
    /// Makes a token for `creator` and audits it.
    ///
    /// # Errors
    /// [`TokenError::Invalid`] for a malformed request, [`TokenError::Exceeds`]
    /// when it would hold more than `creator`, else the store's error.
    pub async fn create(&self, creator: &Principal, new: NewToken) -> Result<Created, TokenError> {
        let new = self.checked(creator, new)?;
        let secret = generate_token();
        let digest = digest(&secret);
        let row = StoredToken {
            id: id_of(&digest),
            digest,
            subject: new.subject,
            scopes: new.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            roles: new.roles,
            namespaces: new.namespaces,
            created_by: Some(creator.subject.clone()),
            created_at: self.clock.now_ms(),
            expires_at: new.expires_at,
            revoked_at: None,
        };
        self.store.create_token(&row, &creator.subject).await?;
        Ok(Created {
            secret: SecretString::from(secret),
            view: self.stored_view(&row),
        })
    }

    /// Every token: the configured ones first, then the stored ones.
    ///
    /// # Errors
    /// The store failed.
    pub async fn list(&self) -> Result<Vec<TokenView>, TokenError> {
        let mut views: Vec<TokenView> = self
            .auth
            .configured()
            .map(|(d, p)| config_view(d, p))
            .collect();
        views.sort_by(|a, b| a.subject.cmp(&b.subject).then(a.id.cmp(&b.id)));
        let stored = self.store.stored_tokens().await?;
        views.extend(stored.iter().map(|t| self.stored_view(t)));
        Ok(views)
    }

    /// Revokes the stored token `id` for `actor` and audits it.
    ///
    /// # Errors
    /// [`TokenError::Conflict`] for a configured or already revoked token,
    /// [`TokenError::NotFound`] for an unknown id, else the store's error.
    pub async fn revoke(&self, actor: &Principal, id: &str) -> Result<TokenView, TokenError> {
        let id = id.trim();
        if self.auth.configured().any(|(d, _)| id_of(d) == id) {
            return Err(TokenError::Conflict(format!(
                "token {id} is in the config file ([[tokens]]): remove it there and restart"
            )));
        }
        match self.store.revoke_token(id, &actor.subject).await? {
            Some(row) => {
                self.auth.forget(&row.digest);
                Ok(self.stored_view(&row))
            }
            None => {
                let known = self.store.stored_tokens().await?;
                if known.iter().any(|t| t.id == id) {
                    Err(TokenError::Conflict(format!(
                        "token {id} is already revoked"
                    )))
                } else {
                    Err(TokenError::NotFound(id.to_owned()))
                }
            }
        }
    }

    fn checked(&self, creator: &Principal, mut new: NewToken) -> Result<NewToken, TokenError> {
        new.subject = new.subject.trim().to_owned();
        if new.subject.is_empty()
            || new.subject.len() > MAX_SUBJECT
            || new.subject.chars().any(char::is_control)
        {
            return Err(invalid(
                "subject",
                format!("a subject is 1 to {MAX_SUBJECT} bytes without control characters"),
            ));
        }
        if new.scopes.is_empty() {
            return Err(invalid("scopes", "name at least one scope".into()));
        }
        new.scopes.sort_by_key(|s| s.as_str());
        new.scopes.dedup();
        new.roles = normalised_roles(&new.roles)?;
        if let Some(at) = new.expires_at {
            if at <= self.clock.now_ms() {
                return Err(invalid(
                    "expires_at",
                    "the expiry must be in the future".into(),
                ));
            }
        }
        within(creator, &new)?;
        Ok(new)
    }

    fn stored_view(&self, t: &StoredToken) -> TokenView {
        let now = self.clock.now_ms();
        let state = if t.revoked_at.is_some() {
            "revoked"
        } else if t.expires_at.is_some_and(|at| at <= now) {
            "expired"
        } else {
            "active"
        };
        TokenView {
            id: t.id.clone(),
            source: Source::Stored,
            subject: t.subject.clone(),
            scopes: t.scopes.clone(),
            roles: t.roles.clone(),
            namespaces: t
                .namespaces
                .as_ref()
                .map(|l| l.iter().map(ToString::to_string).collect()),
            created_by: t.created_by.clone(),
            created_at: Some(t.created_at),
            expires_at: t.expires_at,
            revoked_at: t.revoked_at,
            state,
        }
    }
}

fn invalid(field: &'static str, message: String) -> TokenError {
    TokenError::Invalid { field, message }
}

fn normalised_roles(roles: &[String]) -> Result<Vec<String>, TokenError> {
    let mut out: Vec<String> = Vec::new();
    for role in roles {
        let role = role.trim();
        if role.is_empty()
            || role.len() > MAX_SUBJECT
            || role.contains(',')
            || role.chars().any(char::is_control)
        {
            return Err(invalid(
                "roles",
                format!("a role is 1 to {MAX_SUBJECT} bytes without commas or control characters"),
            ));
        }
        if !out.iter().any(|r| r == role) {
            out.push(role.to_owned());
        }
    }
    Ok(out)
}

/// Checks that `new` holds nothing `creator` does not.
fn within(creator: &Principal, new: &NewToken) -> Result<(), TokenError> {
    if let Some(s) = new.scopes.iter().find(|s| !creator.has(**s)) {
        return Err(TokenError::Exceeds(format!(
            "you do not hold the scope {:?}, so no token you make can",
            s.as_str()
        )));
    }
    if let Some(r) = new
        .roles
        .iter()
        .find(|r| !creator.roles.iter().any(|c| same_identity(c, r)))
    {
        return Err(TokenError::Exceeds(format!(
            "you do not hold the role {r:?}, so no token you make can"
        )));
    }
    let Namespaces::Only(mine) = &creator.namespaces else {
        return Ok(());
    };
    let Some(wanted) = &new.namespaces else {
        return Err(TokenError::Exceeds(format!(
            "you reach only the namespaces {}: name the new token's namespaces inside them",
            creator.namespaces.describe().unwrap_or_default()
        )));
    };
    if let Some(p) = wanted.iter().find(|p| !mine.iter().any(|m| m.covers(p))) {
        return Err(TokenError::Exceeds(format!(
            "namespace {p} is outside the namespaces you reach ({})",
            creator.namespaces.describe().unwrap_or_default()
        )));
    }
    Ok(())
}

/// Roles compared as people mean them: case and surrounding white space
/// do not make another role (as `approval::identity`, which sits above
/// this part).
fn same_identity(a: &str, b: &str) -> bool {
    a.trim().to_lowercase() == b.trim().to_lowercase()
}

fn config_view(digest: &str, p: &Principal) -> TokenView {
    let mut scopes: Vec<String> = p.scopes.iter().map(|s| s.as_str().to_owned()).collect();
    scopes.sort();
    TokenView {
        id: id_of(digest),
        source: Source::Config,
        subject: p.subject.clone(),
        scopes,
        roles: p.roles.clone(),
        namespaces: match &p.namespaces {
            Namespaces::All => None,
            Namespaces::Only(l) => Some(l.iter().map(ToString::to_string).collect()),
        },
        created_by: None,
        created_at: None,
        expires_at: None,
        revoked_at: None,
        state: "active",
    }
}

#[cfg(test)]
mod tests;
