// One-shot: apply the migrations and seed the built-in sim/* catalog (the compose `migrate`
// service, or `npm run migrate`). Creates the database when missing. No demo tenant or key: that
// is the local `npm start` convenience only. Exit 0 on success, 1 on failure.
import { loadConfig } from '../config.ts';
import { migrate } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { redactUrl } from './services.ts';
import { seedCatalog } from './seed.ts';

const log = createLogger('migrate');

async function main(): Promise<void> {
  const { DATABASE_URL } = loadConfig();
  const deadline = Date.now() + 60000;
  // The database may still be starting (compose): retry the first connection for a minute.
  for (;;) {
    try {
      const applied = await migrate(DATABASE_URL);
      log.info('migrations applied', { database_url: redactUrl(DATABASE_URL), applied });
      break;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (Date.now() > deadline || !['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', '57P03'].includes(String(code))) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const db = createPool(DATABASE_URL, 1);
  try {
    const created = await seedCatalog(db);
    log.info('catalog seeded', { created });
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
