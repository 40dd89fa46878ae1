//! A database of a test's own on the shared MariaDB (`LEAFID_MYSQL_URL`) or PostgreSQL
//! (`LEAFID_PG_URL`), made by the admin of those URLs, with a user of its own that has
//! the DML grants docs/errors.md lists (`SELECT, INSERT, UPDATE`, no `CREATE`), as
//! shops run servers. Dropped, user and all, when the value is dropped.
//!
//! On PostgreSQL 15+ no role but the owner may create in `public`, and the grants on
//! tables the admin creates later reach the user through `ALTER DEFAULT PRIVILEGES`;
//! on MySQL the database-wide grant covers them.

#![allow(dead_code)] // each test binary that includes this file uses part of it

use std::sync::atomic::{AtomicU32, Ordering};

/// A password the test users log in with.
const PASSWORD: &str = "dml-only-pw";

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Mysql,
    Postgres,
}

/// A database and a DML-only user of one test.
pub struct OwnDatabase {
    pub server: Server,
    /// The admin (the environment's user) on this database.
    pub admin_url: String,
    /// The DML-only user on this database.
    pub dml_url: String,
    name: String,
    base: String,
}

/// Runs `sql` (one or more statements) on `url` as one simple query.
pub fn exec(url: &str, sql: &str) {
    let (url, sql) = (url.to_string(), sql.to_string());
    leafid::runtime::block_on(async move {
        use sqlx::Connection;
        if url.starts_with("mysql:") {
            let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut c)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        } else {
            let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut c)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    });
}

fn with_user_and_db(base: &str, user: Option<&str>, db: &str) -> String {
    let mut u = url::Url::parse(base).unwrap();
    if let Some(user) = user {
        u.set_username(user).unwrap();
        u.set_password(Some(PASSWORD)).unwrap();
    }
    u.set_path(&format!("/{db}"));
    u.to_string()
}

impl OwnDatabase {
    /// A new database `lp_{label}_{pid}_{n}` and its DML-only user of the same name.
    pub fn new(server: Server, label: &str) -> OwnDatabase {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lp_{label}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let base = match server {
            Server::Mysql => std::env::var("LEAFID_MYSQL_URL"),
            Server::Postgres => std::env::var("LEAFID_PG_URL"),
        }
        .expect("LEAFID_MYSQL_URL / LEAFID_PG_URL not set: source .services/env");
        match server {
            Server::Mysql => exec(
                &base,
                &format!(
                    "DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}`; \
                     DROP USER IF EXISTS '{name}'@'%'; \
                     CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'; \
                     GRANT SELECT, INSERT, UPDATE ON `{name}`.* TO '{name}'@'%'"
                ),
            ),
            Server::Postgres => {
                exec(
                    &base,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                );
                exec(&base, &format!("CREATE DATABASE {name}"));
                exec(
                    &base,
                    &format!(
                        "DROP ROLE IF EXISTS {name}; \
                         CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'"
                    ),
                );
                let admin = with_user_and_db(&base, None, &name);
                // The tables the admin creates later: DML for the user, nothing more
                // (PostgreSQL 15 gives PUBLIC no CREATE on `public`).
                exec(
                    &admin,
                    &format!(
                        "REVOKE CREATE ON SCHEMA public FROM PUBLIC; \
                         ALTER DEFAULT PRIVILEGES IN SCHEMA public \
                         GRANT SELECT, INSERT, UPDATE ON TABLES TO {name}"
                    ),
                );
            }
        }
        OwnDatabase {
            server,
            admin_url: with_user_and_db(&base, None, &name),
            dml_url: with_user_and_db(&base, Some(&name), &name),
            name,
            base,
        }
    }

    /// Runs `sql` as the admin on this database.
    pub fn admin(&self, sql: &str) {
        exec(&self.admin_url, sql);
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        let name = &self.name;
        match self.server {
            Server::Mysql => exec(
                &self.base,
                &format!("DROP DATABASE IF EXISTS `{name}`; DROP USER IF EXISTS '{name}'@'%'"),
            ),
            Server::Postgres => {
                exec(
                    &self.base,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                );
                exec(&self.base, &format!("DROP ROLE IF EXISTS {name}"));
            }
        }
    }
}
