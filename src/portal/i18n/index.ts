import { type Lang, makeTranslator } from '../../web/i18n.ts';
import { en } from './en.ts';
import { ptBR, type Messages } from './pt-BR.ts';

// The portal's strings, in the languages of src/web/i18n.ts (shared with the console).

export type { Lang };
export type MessageKey = keyof Messages;
const catalogs: Record<Lang, Messages> = { 'pt-BR': ptBR, en };

export const translator = makeTranslator<MessageKey>(catalogs);
export type T = ReturnType<typeof translator>;
