//! Fresh databases for one benchmark: a temporary SQLite file, or a new
//! PostgreSQL database dropped afterwards.

use anyhow::{Context, Result};
use sqlx::Connection;

/// A database that exists for one measurement.
pub struct Database {
    /// `sqlite://…` or `postgres://…/<name>`.
    pub url: String,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The PostgreSQL server's maintenance URL and this database's name.
    pg: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    /// Creates an empty database for `backend`.
    pub async fn create(backend: &str, pg_url: &str, tag: &str) -> Result<Self> {
        match backend {
            "sqlite" => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite://{}", dir.path().join("bench.db").display());
                Ok(Self {
                    url,
                    backend: "sqlite",
                    pg: None,
                    _dir: Some(dir),
                })
            }
            "postgres" => {
                let name = format!("oncegate_bench_{}_{tag}", std::process::id());
                let mut admin = sqlx::PgConnection::connect(pg_url)
                    .await
                    .context("connecting to PostgreSQL")?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await?;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await?;
                let base = pg_url.rsplit_once('/').map_or(pg_url, |(b, _)| b);
                Ok(Self {
                    url: format!("{base}/{name}"),
                    backend: "postgres",
                    pg: Some((pg_url.to_owned(), name)),
                    _dir: None,
                })
            }
            other => anyhow::bail!("unknown backend {other:?}: sqlite or postgres"),
        }
    }

    /// The PostgreSQL database name, for `pgbench`.
    pub fn pg_name(&self) -> Option<&str> {
        self.pg.as_ref().map(|(_, name)| name.as_str())
    }

    /// Runs SQL statements (separated by `;`) on the database.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        if self.backend == "sqlite" {
            let mut c = sqlx::SqliteConnection::connect(&self.url).await?;
            sqlx::raw_sql(sql).execute(&mut c).await?;
            c.close().await?;
        } else {
            let mut c = sqlx::PgConnection::connect(&self.url).await?;
            sqlx::raw_sql(sql).execute(&mut c).await?;
            c.close().await?;
        }
        Ok(())
    }

    /// One integer a query returns.
    pub async fn count(&self, sql: &str) -> Result<i64> {
        if self.backend == "sqlite" {
            let mut c = sqlx::SqliteConnection::connect(&self.url).await?;
            let n = sqlx::query_scalar(sql).fetch_one(&mut c).await?;
            c.close().await?;
            Ok(n)
        } else {
            let mut c = sqlx::PgConnection::connect(&self.url).await?;
            let n = sqlx::query_scalar(sql).fetch_one(&mut c).await?;
            c.close().await?;
            Ok(n)
        }
    }

    /// Drops a PostgreSQL database (a SQLite file goes with its directory).
    pub async fn drop_now(self) -> Result<()> {
        if let Some((admin, name)) = &self.pg {
            let mut c = sqlx::PgConnection::connect(admin).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut c)
                .await?;
        }
        Ok(())
    }
}
