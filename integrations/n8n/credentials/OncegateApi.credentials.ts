import type {
	IAuthenticateGeneric,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

/** Where oncegate listens and the workflow token the nodes call it with. */
export class OncegateApi implements ICredentialType {
	name = 'oncegateApi';

	displayName = 'Oncegate API';


	icon = 'file:oncegate.svg' as const;

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://127.0.0.1:8080',
			placeholder: 'https://oncegate.example.com',
			description:
				'Where oncegate listens, without a trailing path. From n8n in Docker, use the host name of the oncegate container or host.docker.internal, never 127.0.0.1.',
		},
		{
			displayName: 'Token',
			name: 'token',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				'A token with the workflow scope, from `oncegate token new --subject n8n --scope workflow`',
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.token}}',
			},
		},
	};

	// POST /v1/noop authenticates like a claim and writes nothing.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/noop',
			method: 'POST',
			body: {},
			json: true,
		},
	};
}
