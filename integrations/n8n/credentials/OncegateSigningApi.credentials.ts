import type { ICredentialType, INodeProperties } from 'n8n-workflow';

/** The Standard Webhooks secrets oncegate signs its forwards with. */
export class OncegateSigningApi implements ICredentialType {
	name = 'oncegateSigningApi';

	displayName = 'Oncegate Signing API';


	icon = 'file:oncegate.svg' as const;

	properties: INodeProperties[] = [
		{
			displayName: 'Signing Secrets',
			name: 'secrets',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			placeholder: 'whsec_...',
			description:
				'The target\'s signing_secrets in oncegate\'s config (whsec_…). While rotating, give the old and the new one separated by a space: a forward signed by either is accepted.',
		},
	];
}
