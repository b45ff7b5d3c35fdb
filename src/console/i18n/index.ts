import { type Lang, parseLang } from '../../portal/i18n/index.ts';
import { en } from './en.ts';
import { type ConsoleMessages, ptBR } from './pt-BR.ts';

// The console's strings, in pt-BR and English like the portal's (whose languages, cookie rule and
// `?lang=` switch it shares).

export { type Lang, parseLang };
export type ConsoleKey = keyof ConsoleMessages;
const catalogs: Record<Lang, ConsoleMessages> = { 'pt-BR': ptBR, en };

export function translator(lang: Lang) {
  const cat = catalogs[lang];
  return (key: ConsoleKey, vars: Record<string, string | number> = {}) =>
    cat[key].replace(/\{(\w+)\}/g, (_, name: string) => (name in vars ? String(vars[name]) : `{${name}}`));
}
export type T = ReturnType<typeof translator>;
