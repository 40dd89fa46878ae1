//! The MySQL and PostgreSQL stores under a user with the DML grants alone (issue 28,
//! item 4), each in a database of the test's own whose table the admin made: the store
//! starts (`create_table` on included: it creates only what is missing) and issues,
//! and a grant missing is `AccessDenied` naming the grants, never an outage a
//! supervisor retries forever.

use leafid::error::CauseKind;
use leafid::{Error, ErrorKind, SegmentGenerator, SegmentOptions};

use crate::support::own_database::{OwnDatabase, Server};
use crate::support::watch_proxy::WatchProxy;

fn connect(url: &str) -> leafid::Result<SegmentGenerator> {
    SegmentGenerator::connect_blocking(url, SegmentOptions::default().create_table(true))
}

/// The admin makes `leaf_alloc` and a tag; the DML-only user's generator starts with
/// `create_table` on, issues, and creates a tag of its own.
fn dml_only_user_starts_and_issues(server: Server) {
    let db = OwnDatabase::new(server, "store_dml");
    let admin = connect(&db.admin_url).unwrap();
    let a = admin.clone();
    leafid::runtime::block_on(async move { a.create_tag("order", 1, 10, "test").await }).unwrap();
    admin.close();

    let gen = connect(&db.dml_url).unwrap_or_else(|e| panic!("{server:?}: {e}"));
    let ids: Vec<i64> = (0..25).map(|_| gen.next_id("order").unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("invoice", 1, 10, "test").await }).unwrap();
    assert!(gen.next_id("invoice").unwrap() > 0);
    gen.close();
}

#[test]
fn a_dml_only_user_starts_the_mysql_store_and_issues() {
    dml_only_user_starts_and_issues(Server::Mysql);
}

#[test]
fn a_dml_only_user_starts_the_postgres_store_and_issues() {
    dml_only_user_starts_and_issues(Server::Postgres);
}

/// `e` is the refusal of a grant: `AccessDenied`, a configuration error, naming what to
/// grant, and nothing in it says to retry.
fn assert_grant_refused(e: &Error, grant: &str) {
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert_eq!(e.cause_kind(), Some(CauseKind::LoginRefused), "{e}");
    let text = e.to_string();
    assert!(text.contains(grant), "{text}");
    assert!(text.contains("leaf_alloc"), "{text}");
    assert!(!text.contains("retry"), "{text}");
}

/// No table yet, and a user that may not create one: told to grant CREATE (or have it
/// made), at once.
fn missing_table_without_create(server: Server) {
    let db = OwnDatabase::new(server, "store_nocreate");
    let e = connect(&db.dml_url).unwrap_err();
    assert_grant_refused(&e, "CREATE");
}

#[test]
fn a_mysql_user_without_create_is_told_the_grants_when_the_table_is_missing() {
    missing_table_without_create(Server::Mysql);
}

#[test]
fn a_postgres_user_without_create_is_told_the_grants_when_the_table_is_missing() {
    missing_table_without_create(Server::Postgres);
}

/// A user that may read but not write `leaf_alloc`: `create_tag` is refused as
/// `AccessDenied` naming the grants.
fn missing_insert_grant(server: Server) {
    let db = OwnDatabase::new(server, "store_noinsert");
    connect(&db.admin_url).unwrap().close();
    match server {
        Server::Mysql => db.admin(&format!(
            "REVOKE INSERT, UPDATE ON `{0}`.* FROM '{0}'@'%'",
            db.name()
        )),
        Server::Postgres => db.admin(&format!(
            "REVOKE INSERT, UPDATE ON leaf_alloc FROM {}",
            db.name()
        )),
    }
    let gen = connect(&db.dml_url).unwrap();
    let g = gen.clone();
    let e = leafid::runtime::block_on(async move { g.create_tag("order", 1, 10, "t").await })
        .unwrap_err();
    assert_grant_refused(&e, "INSERT");
    gen.close();
}

#[test]
fn a_mysql_user_without_insert_is_access_denied_not_an_outage() {
    missing_insert_grant(Server::Mysql);
}

#[test]
fn a_postgres_user_without_insert_is_access_denied_not_an_outage() {
    missing_insert_grant(Server::Postgres);
}

/// `e` is `AccessDenied` (a configuration error) whose text says `advice` and never to
/// retry: a refusal that retrying cannot fix, not an outage.
fn assert_refused_with(e: &Error, advice: &str) {
    assert!(matches!(e, Error::AccessDenied { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    let text = e.to_string();
    assert!(text.contains(advice), "{text}");
    assert!(!text.contains("retry"), "{text}");
}

/// MariaDB answers a locked account (`ACCOUNT LOCK`) with 4151 (MySQL: 3118).
#[test]
fn a_locked_mysql_account_is_access_denied_not_an_outage() {
    let db = OwnDatabase::new(Server::Mysql, "store_locked");
    db.admin(&format!("ALTER USER '{}'@'%' ACCOUNT LOCK", db.name()));
    assert_refused_with(&connect(&db.dml_url).unwrap_err(), "unlock it");
}

/// An expired password (`PASSWORD EXPIRE`): MariaDB lets the login in and refuses every
/// statement with 1820 (1862 at the login for some clients).
#[test]
fn an_expired_mysql_password_is_access_denied_not_an_outage() {
    let db = OwnDatabase::new(Server::Mysql, "store_expired");
    connect(&db.admin_url).unwrap().close();
    db.admin(&format!("ALTER USER '{}'@'%' PASSWORD EXPIRE", db.name()));
    assert_refused_with(&connect(&db.dml_url).unwrap_err(), "set a new password");
}

/// A role without USAGE on `public`, the only schema on its search_path: PostgreSQL
/// answers the `CREATE TABLE` with 3F000 ("no schema has been selected to create in").
#[test]
fn a_postgres_role_without_a_usable_schema_is_told_to_grant_usage() {
    let db = OwnDatabase::new(Server::Postgres, "store_noschema");
    db.admin("REVOKE USAGE ON SCHEMA public FROM PUBLIC");
    assert_refused_with(&connect(&db.dml_url).unwrap_err(), "USAGE");
}

/// MySQL tells a user without global privileges 1044 ("access denied … to database")
/// for a database that does not exist, as for one it has no grant on.
#[test]
fn a_misspelt_mysql_database_is_told_to_check_the_name() {
    let db = OwnDatabase::new(Server::Mysql, "store_misspelt");
    // The URL ends with the database's name (the user has the same name).
    let url = format!("{}_typo", db.dml_url);
    assert_refused_with(
        &connect(&url).unwrap_err(),
        "fix the database name in the URL",
    );
}

/// A role without CONNECT on the database (42501 "permission denied for database") is
/// told to grant CONNECT, not table grants.
#[test]
fn a_postgres_role_without_connect_is_told_to_grant_connect() {
    let db = OwnDatabase::new(Server::Postgres, "store_noconnect");
    db.admin(&format!(
        "REVOKE CONNECT ON DATABASE {} FROM PUBLIC",
        db.name()
    ));
    assert_refused_with(&connect(&db.dml_url).unwrap_err(), "grant it CONNECT");
}

/// The lookup finds `leaf_alloc` missing, a DBA's migration makes it (the proxy runs
/// it just before leafid's `CREATE TABLE` reaches the server), and the DML-only user's
/// `CREATE … IF NOT EXISTS` is refused for want of the grant: the table is there, so
/// the start goes on instead of failing as `AccessDenied`.
fn table_made_between_lookup_and_create(server: Server) {
    let db = OwnDatabase::new(server, "store_race");
    let admin_url = db.admin_url.clone();
    let migration: Box<dyn FnOnce() + Send> =
        Box::new(move || connect(&admin_url).unwrap().close());
    let proxy = WatchProxy::start(&db.dml_url, Some(("CREATE TABLE", migration)));
    let gen = connect(&proxy.url(&db.dml_url)).unwrap_or_else(|e| panic!("{server:?}: {e}"));
    assert_eq!(proxy.count("CREATE TABLE"), 1, "the race was not staged");
    let g = gen.clone();
    leafid::runtime::block_on(async move { g.create_tag("order", 1, 10, "test").await }).unwrap();
    assert!(gen.next_id("order").unwrap() > 0);
    gen.close();
}

#[test]
fn a_mysql_table_made_by_a_migration_during_the_start_is_no_refusal() {
    table_made_between_lookup_and_create(Server::Mysql);
}

#[test]
fn a_postgres_table_made_by_a_migration_during_the_start_is_no_refusal() {
    table_made_between_lookup_and_create(Server::Postgres);
}
