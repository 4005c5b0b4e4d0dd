//! The service's way to the database: a sqlx pool, and how its statements must be sent
//! there (`database.pooler`).
//!
//! Behind a transaction pooler (PgBouncer in `pool_mode = transaction`) a client's
//! consecutive transactions may run on different server sessions, and a server session is
//! handed to the next client the moment it is idle. sqlx 0.9 sends a statement with
//! parameters in two rounds, Parse (+ Sync) and then Bind/Execute (+ Sync), and names every
//! persistent statement (`sqlx_s_N`) even with its statement cache off. Between the two
//! rounds the pooler may give the session away, so neither named nor unnamed statements are
//! safe outside a transaction, and a named one outlives its transaction on a session the
//! client may never see again (PgBouncer before 1.21 cannot follow it; later ones only with
//! `max_prepared_statements`). With [`Pooler::Transaction`] every statement is therefore
//! sent unnamed ([`Unnamed`]) and inside a transaction: a statement run on [`Db`] gets a
//! transaction of its own, one run in a [`Tx`] is in it already. Nothing else relies on the
//! session (advisory locks are transaction-scoped; `LISTEN` has its own direct connection,
//! `database.listen_url`).
//!
//! Written by hand because sqlx has no such mode (its `persistent(false)` still parses
//! in a round of its own); the rest is sqlx's own executors.

use futures_util::{StreamExt, TryStreamExt};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Connection, Either, Execute, Executor, PgPool, Postgres, SqlStr};

/// How the database URL reaches PostgreSQL (`database.pooler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// Directly, or through a pooler that keeps a client's named statements for it
    /// (PgBouncer 1.21+ with `max_prepared_statements`, or session pooling): statements are
    /// prepared once per connection and kept.
    #[default]
    None,
    /// Through a transaction pooler that keeps nothing across transactions (PgBouncer 1.18+
    /// in transaction mode): every statement unnamed and in a transaction.
    Transaction,
}

impl Pooler {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Pooler::None),
            "transaction" => Some(Pooler::Transaction),
            _ => None,
        }
    }
}

/// The pool, and how its statements are sent. An executor (`&Db`), like `&PgPool`.
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    pooler: Pooler,
}

impl Db {
    pub fn new(pool: PgPool, pooler: Pooler) -> Self {
        Self { pool, pooler }
    }

    /// A pool reached directly (tests, and the commands that talk to PostgreSQL itself).
    pub fn direct(pool: PgPool) -> Self {
        Self::new(pool, Pooler::None)
    }

    pub fn pooler(&self) -> Pooler {
        self.pooler
    }

    /// The sqlx pool underneath, for what is not a statement (its size, closing it, a
    /// listener on the same URL). A statement run on it bypasses [`Pooler`].
    pub fn sqlx_pool(&self) -> &PgPool {
        &self.pool
    }

    /// `BEGIN`, timed into [`super::POOL_WAIT`] (see [`super::begin`]).
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        super::begin(self).await
    }

    /// Runs one statement to its end on a connection of its own. A connection that read a
    /// message it did not expect (a notification sent to a session the pooler handed it, a
    /// listener set up through a transaction pooler) is closed, not given back.
    async fn run<'q, E>(&self, query: E) -> Result<Vec<Either<PgQueryResult, PgRow>>, sqlx::Error>
    where
        E: 'q + Execute<'q, Postgres>,
    {
        let mut conn = self.pool.acquire().await?;
        let out = match self.pooler {
            Pooler::None => (&mut *conn).fetch_many(query).try_collect().await,
            Pooler::Transaction => {
                async {
                    let mut tx = conn.begin().await?;
                    let out = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
                    tx.commit().await?;
                    Ok(out)
                }
                .await
            }
        };
        if matches!(out, Err(sqlx::Error::Protocol(_))) {
            conn.close_on_drop();
        }
        out
    }
}

fn rows(steps: Vec<Either<PgQueryResult, PgRow>>) -> impl Iterator<Item = PgRow> {
    steps.into_iter().filter_map(|s| s.right())
}

impl<'p> Executor<'p> for &'p Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> futures_util::stream::BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        futures_util::stream::once(self.run(query))
            .map_ok(|steps| futures_util::stream::iter(steps.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> futures_util::future::BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move { Ok(rows(self.run(query).await?).next()) })
    }

    fn fetch_all<'e, 'q: 'e, E>(self, query: E) -> futures_util::future::BoxFuture<'e, Result<Vec<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move { Ok(rows(self.run(query).await?).collect()) })
    }

    fn execute<'e, 'q: 'e, E>(self, query: E) -> futures_util::future::BoxFuture<'e, Result<PgQueryResult, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move {
            let mut done = PgQueryResult::default();
            done.extend(self.run(query).await?.into_iter().filter_map(|s| s.left()));
            Ok(done)
        })
    }

    // Neither is used by the service (the macros describe at build time, offline); they
    // are sqlx's own.
    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> futures_util::future::BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> futures_util::future::BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

/// A transaction's connection, and how its statements are sent. An executor
/// (`&mut Conn`), like `&mut PgConnection`.
pub struct Conn {
    tx: sqlx::Transaction<'static, Postgres>,
    pooler: Pooler,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("pooler", &self.pooler).finish_non_exhaustive()
    }
}

impl<'c> Executor<'c> for &'c mut Conn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> futures_util::stream::BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooler {
            Pooler::None => (&mut *self.tx).fetch_many(query),
            Pooler::Transaction => (&mut *self.tx).fetch_many(Unnamed(query)),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> futures_util::future::BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooler {
            Pooler::None => (&mut *self.tx).fetch_optional(query),
            Pooler::Transaction => (&mut *self.tx).fetch_optional(Unnamed(query)),
        }
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> futures_util::future::BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> futures_util::future::BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).describe(sql)
    }
}

/// A statement sent unnamed: parsed again each time, kept by no session.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(self) -> SqlStr {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement> {
        self.0.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

/// A transaction, and the span that lasts as long as it does (a child of the span it began
/// in: its time in a trace is from `BEGIN` to the commit or the rollback at drop).
pub struct Tx {
    pub(super) conn: Conn,
    pub(super) _span: tracing::Span,
}

impl Tx {
    pub(super) fn new(tx: sqlx::Transaction<'static, Postgres>, pooler: Pooler, span: tracing::Span) -> Self {
        Self { conn: Conn { tx, pooler }, _span: span }
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.conn.tx.commit().await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.conn.tx.rollback().await
    }
}

impl std::ops::Deref for Tx {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}
