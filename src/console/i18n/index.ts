import { type Lang, makeTranslator } from '../../web/i18n.ts';
import { en } from './en.ts';
import { type ConsoleMessages, ptBR } from './pt-BR.ts';

// The console's strings, in pt-BR and English like the portal's (the languages, cookie rule and
// `?lang=` switch of src/web/i18n.ts).

export type { Lang };
export type ConsoleKey = keyof ConsoleMessages;
const catalogs: Record<Lang, ConsoleMessages> = { 'pt-BR': ptBR, en };

export const translator = makeTranslator<ConsoleKey>(catalogs);
export type T = ReturnType<typeof translator>;
