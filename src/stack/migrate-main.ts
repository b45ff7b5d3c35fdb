// One-shot: apply the migrations, then the changed SQL function files (the compose `migrate`
// service, or `npm run migrate`). Creates the database when missing. Connected as a superuser it
// first creates the processes' roles and sets the passwords DB_<ROLE>_PASSWORD give
// (src/db/roles.ts). The built-in sim/* catalog is seeded only when asked for (`--with-sim` or
// CATRACA_SEED_SIM=1): in production a sim model would bill tenants for simulated answers. No demo
// tenant or key: that is the local `npm start` convenience only.
// Exit 0 on success, 1 on failure, 2 on an unknown argument.
import { loadConfig } from '../config.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { configuredRolePasswords, type LoginRole } from '../db/roles.ts';
import { createLogger, logCrashes } from '../log.ts';
import { redactUrl } from '../log.ts';
import { seedCatalog } from './seed.ts';

const log = createLogger('migrate');
logCrashes(log);

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const unknown = args.filter((a) => a !== '--with-sim');
  if (unknown.length) {
    process.stderr.write(`usage: npm run migrate [-- --with-sim]   (unknown argument ${JSON.stringify(unknown[0])})\n`);
    process.exit(2);
  }
  const withSim = args.includes('--with-sim') || ['1', 'true', 'yes', 'on'].includes(String(process.env.CATRACA_SEED_SIM ?? '').toLowerCase());
  const config = loadConfig();
  const { DATABASE_URL } = config;
  const rolePasswords = configuredRolePasswords(config);
  const deadline = Date.now() + 60000;
  // The database may still be starting (compose): retry the first connection for a minute.
  for (;;) {
    try {
      const applied = await migrateDatabase(DATABASE_URL, { rolePasswords });
      log.info('migrations applied', { database_url: redactUrl(DATABASE_URL), applied: applied.migrations, functions: applied.functions });
      const unset = Object.keys(rolePasswords).filter((r) => !applied.rolePasswords?.includes(r as LoginRole));
      if (unset.length)
        log.warn('role passwords not set: only a superuser may set them (run the migrations as one, or ALTER ROLE … PASSWORD yourself)', { roles: unset });
      break;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (Date.now() > deadline || !['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', '57P03'].includes(String(code))) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  if (!withSim) {
    log.info('sim/* catalog not seeded (use --with-sim or CATRACA_SEED_SIM=1 for a development database)');
    return;
  }
  const db = createPool(DATABASE_URL, 1);
  try {
    const created = await seedCatalog(db);
    log.info('sim/* catalog seeded', { created });
  } finally {
    await db.end();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    log.error('migration failed', { error: err });
    process.exit(1);
  },
);
